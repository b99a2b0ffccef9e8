"""Allows `python -m aiperf_runner`."""

from aiperf_runner.cli import main

if __name__ == "__main__":
    main()
