"""The `aiperf-runner` command line. Each group of commands lives in its own cli_*.py module."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="aiperf-runner",
    help="AIPerf benchmark runner: run the AutoML benchmark, count FLOPs, sign, verify and submit logs.",
    no_args_is_help=True,
    add_completion=False,
)

# Each module defines `register(app)`; a module that is not there yet is skipped.
_COMMAND_MODULES = ("cli_flops", "cli_keys", "cli_spec", "cli_run", "cli_submit", "cli_system", "cli_estimate")

for _name in _COMMAND_MODULES:
    try:
        _module = importlib.import_module(f"aiperf_runner.{_name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"aiperf_runner.{_name}":
            raise
        continue
    _module.register(app)


def main() -> None:
    app()
