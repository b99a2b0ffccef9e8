"""Training side of the runner: graph -> torch module, datasets, the trial loop. Needs torch."""
