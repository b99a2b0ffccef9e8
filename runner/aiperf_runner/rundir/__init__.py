"""The run directory: its resolved config, lock, checkpoints, privacy masking, `pack --list` and the masked
copies of the trials' output."""
