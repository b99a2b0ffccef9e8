"""Small torch-free helpers: SLURM hostlists, interface addresses, the system facts of a host."""
