"""`aiperf-runner check-list`: check a list against its transparency log, as any reader can."""

from __future__ import annotations

import json

import typer

from aiperf_runner.cli import exitcodes


def check_list(
    server: str = typer.Option(None, "--server", help="The list's service (default: $AIPERF_SERVER, or the server "
                                                        "`register` saved)."),
    key: str = typer.Option(None, "--key", help="The log key's fingerprint, as the list publishes it (default: the "
                                                 "key this machine saw on its first check of this server)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Check a list against its transparency log: the signed head, every entry, the log's consistency with the
    head this machine saw last, and the published list recomputed from the entries. Exit 0: consistent;
    1: inconsistent (each problem names the entry or result); 2: usage."""
    from aiperf_runner.client.listlog import check
    from aiperf_runner.client.service import find_server

    found = find_server(server)
    if not found:
        raise exitcodes.UsageError("no server: pass --server URL (or set AIPERF_SERVER)")
    verdict = check(found, key=key)
    if as_json:
        typer.echo(json.dumps(verdict.as_json(), sort_keys=True))
    else:
        typer.echo(f"log of {verdict.server}: {verdict.size} entries, root {verdict.root[:16]}..., "
                   f"{verdict.listed} results listed")
        if verdict.previous_size is None:
            typer.echo("first check of this list from this machine: its head is kept for the next")
        else:
            typer.echo(f"since the last check (size {verdict.previous_size}): {len(verdict.changes)} change(s)")
            for c in verdict.changes:
                what = f"result {c['result']}" if c["result"] is not None else f"edition {c['edition']}"
                extra = "".join(f" {k} {c[k]!r}" for k in ("by", "reason") if c[k])
                typer.echo(f"  #{c['index']} {c['at']} {c['event']} {what}{extra}")
        for problem in verdict.problems:
            typer.echo(f"INCONSISTENT: {problem}", err=True)
        if verdict.consistent:
            typer.echo("consistent")
    if not verdict.consistent:
        raise typer.Exit(exitcodes.FAILURE)


def register(app: typer.Typer) -> None:
    app.command("check-list")(check_list)



