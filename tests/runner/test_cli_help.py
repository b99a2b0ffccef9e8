"""`aiperf-runner --help` lists each command with its summary as flowing text: no line break kept from the
command's docstring cuts a table cell mid-sentence."""

from __future__ import annotations

import typer
from aiperf_runner.cli import app
from typer.testing import CliRunner


def _commands(typer_app: typer.Typer) -> list[typer.models.CommandInfo]:
    out = list(typer_app.registered_commands)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            out += _commands(group.typer_instance)
    return out


def test_every_summary_is_one_line() -> None:
    infos = _commands(app)
    assert len(infos) >= 15
    for info in infos:
        assert info.short_help, info.name
        assert "\n" not in info.short_help, info.name


def test_the_commands_table_reads_as_sentences() -> None:
    out = CliRunner().invoke(app, ["--help"], terminal_width=80, env={"COLUMNS": "80", "TERM": "dumb"}).output
    cells = [line.split("│")[1] for line in out.splitlines() if line.count("│") == 2]
    rows: list[list[str]] = []  # each command's description, line by line
    for cell in cells:
        name, description = cell[:13].strip(), cell[13:]
        if name and not name.startswith("-"):
            rows.append([])
        if rows:
            rows[-1].append(description)
    assert len(rows) >= 15
    width = max(len(d.rstrip()) for row in rows for d in row)
    for row in rows:
        # A line wraps only where the next word would not have fitted: no break taken from a docstring.
        for line, following in zip(row, row[1:], strict=False):
            assert len(line.rstrip()) + 1 + len(following.split()[0]) > width, (line, following)
