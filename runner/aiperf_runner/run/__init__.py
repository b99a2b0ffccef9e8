"""A benchmark run: the controller's loop, its state, heartbeats, kept weights, progress and reports."""
