"""`aiperf-runner keygen` and `aiperf-runner pack`: the site key and signed bundles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from aiperf_runner.privacy import site_secret
from aiperf_runner.publish import listing, write_public_logs
from aiperf_runner.spec import bundle, keys

EXIT_CODES = "Exit codes: 0 success, 1 failure (the message says why), 2 usage error."


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _emit(as_json: bool, data: dict[str, Any], lines: list[str]) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        typer.echo("\n".join(lines))


def keygen(
    force: Annotated[bool, typer.Option("--force", help="Replace an existing site key (the old one is lost).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON object instead of text.")] = False,
) -> None:
    """Create the site's Ed25519 signing key.

    The private key goes to site_key.pem (mode 0600) in $AIPERF_CONFIG_DIR, else $XDG_CONFIG_HOME/aiperf, else ~/.config/aiperf; the public key to site_key.pub beside it. Register the printed public key with the AIPerf service.
    """
    key = keys.generate_key()
    try:
        private_path, public_path = keys.save_key(key, force=force)
    except keys.KeyFileError as exc:
        message = str(exc)
        try:
            message += f" (fingerprint {keys.fingerprint(keys.load_public_key())})"
        except keys.KeyFileError:
            pass
        raise _fail(f"{message}; use --force to replace it (the old key is lost)") from None
    except OSError as exc:
        raise _fail(f"cannot write the site key: {exc}") from None
    try:
        site_secret()  # the host-name pseudonyms' key, beside the site key (made once, kept on --force)
    except OSError as exc:
        raise _fail(f"cannot write the site secret: {exc}") from None
    data = {"public_key": keys.public_line(key), "fingerprint": keys.fingerprint(key),
            "private_key_path": str(private_path), "public_key_path": str(public_path)}
    _emit(as_json, data, [
        data["public_key"],
        f"fingerprint:  {data['fingerprint']}",
        f"private key:  {private_path}  (mode 0600; keep it on this site)",
        f"public key:   {public_path}  (register it with the AIPerf service)",
    ])


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

    Writes masked copies of the trials' raw output (stdout.public.log, stderr.public.log), MANIFEST.json (the SHA-256 of every file) and MANIFEST.sig (its Ed25519 signature) into RUN_DIR, then a tar.gz of the directory's files. Weights, checkpoints, raw output, SLURM job files and local/ (raw host names, data root, account) are never bundled. Signing again replaces the manifest.
    """
    if list_only:
        _list(run_dir, as_json)
        return
    try:
        private = keys.load_private_key(key)
        write_public_logs(run_dir)
        out = bundle.pack(run_dir, output, private)
    except (keys.KeyFileError, bundle.BundleError) as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot pack {run_dir}: {exc}") from None
    data = {"bundle": str(out), "size_bytes": out.stat().st_size, "fingerprint": keys.fingerprint(private),
            "run_dir": str(run_dir)}
    _emit(as_json, data, [
        f"bundle:       {out}",
        f"size:         {data['size_bytes']} bytes",
        f"signed by:    {data['fingerprint']}",
    ])


def _list(run_dir: Path, as_json: bool) -> None:
    try:
        rows = listing(run_dir)
    except (bundle.BundleError, OSError) as exc:
        raise _fail(f"cannot list {run_dir}: {exc}") from None
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
    app.command(epilog=EXIT_CODES)(keygen)
    app.command(epilog=EXIT_CODES)(pack)
