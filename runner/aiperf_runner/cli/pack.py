"""`aiperf-runner pack`: a run directory signed and written as a bundle to submit (or, with --list, what
the bundle would hold)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from aiperf_runner.rundir.publish import listing, write_public_logs
from aiperf_runner.spec import bundle, keys
from aiperf_runner.spec.errors import AiperfError

EXIT_CODES = "Exit codes: 0 success, 1 failure (the message says why), 2 usage error."


def pack(
    run_dir: Annotated[Path, typer.Argument(help="The run directory to sign and pack.", show_default=False)],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Bundle path (default: RUN_DIR.tar.gz).",
                                                show_default=False)] = None,
    key: Annotated[Path | None, typer.Option("--key", help="Private key file (default: the site key made by keygen).",
                                             show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON object instead of text.")] = False,
    list_only: Annotated[bool, typer.Option("--list", help="Only list every file of the run directory: its size, "
                                            "whether the bundle holds it and why. Writes nothing.")] = False,
) -> None:
    """Sign a run directory and write it as a bundle to submit.

    Writes masked copies of the trials' raw output (stdout.public.log, stderr.public.log), MANIFEST.json (the SHA-256 of every file bundled) and MANIFEST.sig (its Ed25519 signature) into RUN_DIR, then a tar.gz of the files the runner wrote for the bundle. Anything else in RUN_DIR (a note, a job's output) is left out, and so are weights, checkpoints, raw output, SLURM job files and local/ (raw host names, data root, account); --list shows what and why. Signing again replaces the manifest.
    """
    if list_only:
        _list(run_dir, as_json)
        return
    try:
        private = keys.load_private_key(key)
        write_public_logs(run_dir)
        out = bundle.pack(run_dir, output, private)
    except OSError as exc:
        raise AiperfError(f"cannot pack {run_dir}: {exc}") from None
    data = {"bundle": str(out), "size_bytes": out.stat().st_size, "fingerprint": keys.fingerprint(private),
            "run_dir": str(run_dir)}
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    typer.echo("\n".join([
        f"bundle:       {out}",
        f"size:         {data['size_bytes']} bytes",
        f"signed by:    {data['fingerprint']}",
    ]))


def _list(run_dir: Path, as_json: bool) -> None:
    try:
        rows = listing(run_dir)
    except (bundle.BundleError, OSError) as exc:
        raise AiperfError(f"cannot list {run_dir}: {exc}") from None
    held = [r for r in rows if r["bundled"]]
    total = sum(r["size"] or 0 for r in held)
    if as_json:
        typer.echo(json.dumps({"run_dir": str(run_dir), "files": rows, "bundled_bytes": total}, indent=2))
        return
    width = max(len(r["path"]) for r in rows)
    lines = [f"the bundle will hold {len(held)} files, {total} bytes before compression:"]
    lines += [f"  {r['path']:<{width}}  {_size(r['size']):>9}  {r['why']}" for r in held]
    left = [r for r in rows if not r["bundled"]]
    if left:
        lines.append("left out (they stay in the run directory):")
        lines += [f"  {r['path']:<{width}}  {_size(r['size']):>9}  {r['why']}" for r in left]
    typer.echo("\n".join(lines))


def _size(size: int | None) -> str:
    return "(by pack)" if size is None else str(size)


def register(app: typer.Typer) -> None:
    app.command(epilog=EXIT_CODES)(pack)
