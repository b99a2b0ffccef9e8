"""AIPerf benchmark runner: runs the AutoML workload and writes a signed, hash-chained log."""

__version__ = "0.1.0"
