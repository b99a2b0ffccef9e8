"""The command line's one error handler and its one list of command modules.

Every command module in cli/ is registered from `COMMAND_MODULES`; an `AiperfError` raised in any
command reaches the user as `error: <message>` on stderr with its class's exit code; every error the
runner raises on purpose derives from `AiperfError`.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest
import typer
from aiperf_runner import cli
from aiperf_runner.cli import COMMAND_MODULES, AiperfCommands, app, exitcodes
from aiperf_runner.cli.exitcodes import UsageError
from aiperf_runner.client.service import Failure
from aiperf_runner.data.presets import PresetError
from aiperf_runner.spec.errors import AiperfError
from typer.testing import CliRunner

runner = CliRunner()

# Modules of cli/ that register no command: what the commands share.
HELPERS = {"exitcodes", "options"}

ERRORS = [
    ("spec.eventlog", "LogError"), ("spec.runio", "RunIOError"), ("spec.graph", "GraphError"),
    ("spec.bundle", "BundleError"), ("spec.keys", "KeyFileError"), ("client.service", "Failure"),
    ("data.staging", "StageError"), ("data.presets", "PresetError"), ("search.morphism", "MorphismError"),
    ("train.config", "TrialError"), ("train.data", "DataError"), ("search.buffer", "SearchProcessError"),
    ("util.hostlist", "HostlistError"), ("backends.slurm.commands", "SlurmError"),
    ("backends.zygote", "ZygoteError"), ("data.idx", "IdxError"), ("rundir.config", "ControllerError"),
    ("cli.exitcodes", "UsageError"), ("data.shards", "ShardError"),
]


def _cli_modules() -> set[str]:
    return {m.name for m in pkgutil.iter_modules(cli.__path__)}


def test_every_command_module_is_in_the_explicit_list() -> None:
    listed = {m.__name__.rpartition(".")[2] for m in COMMAND_MODULES}
    assert listed == _cli_modules() - HELPERS
    for module in COMMAND_MODULES:
        assert callable(getattr(module, "register", None)), module.__name__
    for name in HELPERS:
        assert not hasattr(importlib.import_module(f"aiperf_runner.cli.{name}"), "register"), name


def test_every_command_is_registered() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, AiperfCommands)
    assert set(group.commands) == {"flops", "keygen", "pack", "verify", "run", "status", "report", "register", "submit",
                             "evidence", "system", "estimate", "preflight", "relay", "check-list", "stage"}


def _cli_imports(source: str) -> set[str]:
    """The modules of aiperf_runner.cli that `source` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "aiperf_runner.cli":
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aiperf_runner.cli."):
            found.add((node.module or "").split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[2] for alias in node.names if alias.name.startswith("aiperf_runner.cli.")}
    return found


def test_no_command_module_imports_another() -> None:
    """Shared options live in cli/options.py, exit codes in cli/exitcodes.py; commands stay apart."""
    for module in COMMAND_MODULES:
        imported = _cli_imports(Path(module.__file__ or "").read_text())
        assert imported <= HELPERS, (module.__name__, imported - HELPERS)


def test_the_exit_codes_of_the_error_classes() -> None:
    assert AiperfError.exit_code == exitcodes.FAILURE == 1
    assert UsageError.exit_code == exitcodes.USAGE == 2
    assert (exitcodes.SUCCESS, exitcodes.TIMED_OUT, exitcodes.INTERRUPTED) == (0, 3, 130)


@pytest.mark.parametrize(("module", "name"), ERRORS, ids=[name for _, name in ERRORS])
def test_each_runner_error_is_an_aiperf_error(module: str, name: str) -> None:
    if module.startswith("train."):
        pytest.importorskip("torch")
    cls = getattr(importlib.import_module(f"aiperf_runner.{module}"), name)
    assert issubclass(cls, AiperfError)


def _tiny_app() -> typer.Typer:
    tiny = typer.Typer(cls=AiperfCommands)
    group = typer.Typer()
    tiny.add_typer(group, name="group")

    @tiny.command()
    def refused() -> None:
        typer.echo("working")
        raise PresetError("unknown preset 'x'")

    @tiny.command()
    def usage() -> None:
        raise UsageError("--rules 'z': unknown")

    @tiny.command()
    def bug() -> None:
        raise RuntimeError("not meant")

    @group.command()
    def inner() -> None:
        raise Failure("the service refused it", "check")

    return tiny


@pytest.mark.parametrize(("args", "code", "message"), [
    (["refused"], 1, "error: unknown preset 'x'\n"),
    (["usage"], 2, "error: --rules 'z': unknown\n"),
    (["group", "inner"], 1, "error: the service refused it\n"),
])
def test_an_aiperf_error_reaches_the_user_with_its_exit_code(args: list[str], code: int, message: str) -> None:
    result = runner.invoke(_tiny_app(), args)
    assert result.exit_code == code, result.output
    assert result.stderr == message
    assert result.stdout == ("working\n" if args == ["refused"] else "")


def test_other_exceptions_are_not_swallowed() -> None:
    result = runner.invoke(_tiny_app(), ["bug"])
    assert isinstance(result.exception, RuntimeError) and "error:" not in result.stderr


def test_real_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIPERF_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("AIPERF_SERVER", raising=False)
    monkeypatch.delenv("AIPERF_TOKEN", raising=False)
    missing = tmp_path / "missing"
    result = runner.invoke(app, ["verify", str(missing)])  # a UsageError
    assert (result.exit_code, result.stderr) == (2, f"error: {missing} does not exist\n")
    # A directory that is not a run: one line that says so, not a table of failed checks.
    not_a_run = tmp_path / "elsewhere"
    not_a_run.mkdir()
    result = runner.invoke(app, ["verify", str(not_a_run)])
    assert (result.exit_code, result.stderr) == (2, f"error: {not_a_run} is not a run directory "
                                                    "(no run.json, no events.jsonl)\n")
    for command in ("status", "report"):
        result = runner.invoke(app, [command, str(not_a_run)])
        assert (result.exit_code, result.stderr) == (1, f"error: {not_a_run}: not a run directory (no run.json)\n")
    result = runner.invoke(app, ["pack", str(missing)])  # the site key's KeyFileError, from spec/
    assert result.exit_code == 1 and result.stderr.startswith("error: no private key at "), result.output
    result = runner.invoke(app, ["system", "list"])  # a Failure, in a subcommand
    assert result.exit_code == 1 and result.stderr.startswith("error: no AIPerf service configured"), result.output
