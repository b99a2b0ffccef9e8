"""The run directory: its resolved config, lock, checkpoints, privacy masking and what a bundle holds."""
