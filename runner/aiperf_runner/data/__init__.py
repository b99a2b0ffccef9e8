"""The presets' data: presets (budgets, durations, dataset blocks), Fashion-MNIST's IDX files, staging."""
