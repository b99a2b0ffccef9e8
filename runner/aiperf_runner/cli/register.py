"""`aiperf-runner register`: the site's public key (site_key.pub from keygen) to an AIPerf service.

The server and token are saved for the commands that talk to the service later.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from aiperf_runner.cli.options import AsJson, Server, Token
from aiperf_runner.client.service import find_service, save_service
from aiperf_runner.client.submission import register_key


def register_cmd(
    server: Server,
    token: Token,
    pubkey: Annotated[Path | None, typer.Option("--pubkey", help="Public key file (default: site_key.pub "
                                                "in the config directory).", show_default=False)] = None,
    label: Annotated[str, typer.Option("--label", help="A note shown with the key.")] = "",
    as_json: AsJson = False,
) -> None:
    """Register the site's public key with an AIPerf service (uses the site's API token).

    The server and token are saved (service.json in the config directory, mode 0600) for the
    commands that talk to the service later: `system`, `run --system`, `submit`.
    """
    service = find_service(server, token)
    assert service is not None
    data = register_key(service, pubkey, label)
    data["service_file"] = str(save_service(service.server, service.token))
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        state = "registered" if data["created"] else "already registered"
        typer.echo(f"{data['fingerprint']} {state} for site {data['site']['name']}")


def register(app: typer.Typer) -> None:
    app.command("register", epilog="Exit codes: 0 registered, 1 refused or failed, 2 usage error.")(register_cmd)
