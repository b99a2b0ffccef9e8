"""The `aiperf-runner` command line: one module per command (or group of commands), registered from
the list below, and the one place an `AiperfError` becomes `error: <message>` and its exit code."""

from __future__ import annotations

import inspect
from typing import Any

import typer
from typer.core import TyperGroup

from aiperf_runner.cli import (
    checklist,
    estimate,
    flops,
    keys,
    pack,
    preflight,
    register,
    relay,
    run,
    stage,
    status,
    submit,
    system,
    verify,
)
from aiperf_runner.spec.errors import AiperfError

# Every command module, explicitly (one missing is an ImportError at startup), in the order of `--help`.
COMMAND_MODULES = (flops, keys, pack, verify, run, stage, status, register, submit, system, estimate, preflight, relay,
                   checklist)


class AiperfCommands(TyperGroup):
    """The commands, with their errors handled: an `AiperfError` from any command (or a group's
    subcommand) is printed as `error: <message>` on stderr and exits with its class's exit code
    (aiperf_runner/cli/exitcodes.py); anything else is a bug and keeps its traceback."""

    def invoke(self, ctx: Any) -> Any:  # the click Context typer vendors (typer._click, private)
        try:
            return super().invoke(ctx)
        except AiperfError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(
    name="aiperf-runner",
    help="AIPerf benchmark runner: run the AutoML benchmark, count FLOPs, sign, verify and submit logs.",
    no_args_is_help=True,
    add_completion=False,
    cls=AiperfCommands,
)


def one_line_summaries(typer_app: typer.Typer) -> None:
    """Give every command (and every group's) its first help paragraph as one line for the commands' table:
    typer's rich help keeps a docstring's line breaks there, which cut its cells mid-sentence."""
    for info in typer_app.registered_commands:
        if info.short_help is None:
            text = info.help or inspect.getdoc(info.callback) or ""
            info.short_help = " ".join(text.split("\n\n")[0].split())
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            one_line_summaries(group.typer_instance)


for _module in COMMAND_MODULES:
    _module.register(app)
one_line_summaries(app)


def main() -> None:
    app()
