"""`aiperf-runner keygen`: the site's signing key."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from aiperf_runner.rundir.privacy import site_secret
from aiperf_runner.spec import keys
from aiperf_runner.spec.errors import AiperfError

EXIT_CODES = "Exit codes: 0 success, 1 failure (the message says why), 2 usage error."


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
        raise AiperfError(f"{_with_fingerprint(str(exc))}; use --force to replace it (the old key is lost)") from None
    except OSError as exc:
        raise AiperfError(f"cannot write the site key: {exc}") from None
    try:
        site_secret()  # the host-name pseudonyms' key, beside the site key (made once, kept on --force)
    except OSError as exc:
        raise AiperfError(f"cannot write the site secret: {exc}") from None
    data = {"public_key": keys.public_line(key), "fingerprint": keys.fingerprint(key),
            "private_key_path": str(private_path), "public_key_path": str(public_path)}
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    typer.echo("\n".join([
        data["public_key"],
        f"fingerprint:  {data['fingerprint']}",
        f"private key:  {private_path}  (mode 0600; keep it on this site)",
        f"public key:   {public_path}  (register it with the AIPerf service)",
    ]))


def _with_fingerprint(message: str) -> str:
    """The refusal to overwrite names the key that is there, when it can be read."""
    try:
        return message + f" (fingerprint {keys.fingerprint(keys.load_public_key())})"
    except keys.KeyFileError:
        return message


def register(app: typer.Typer) -> None:
    app.command(epilog=EXIT_CODES)(keygen)
