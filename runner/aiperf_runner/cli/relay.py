"""`aiperf-runner relay --listen HOST:PORT`: the service's traffic of compute nodes without internet,
forwarded from a host that reaches the service (client/relay.py)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from aiperf_runner.cli.exitcodes import UsageError
from aiperf_runner.cli.options import Server
from aiperf_runner.client.service import find_server


def relay_cmd(
    listen: Annotated[str, typer.Option("--listen", metavar="HOST:PORT", show_default=False,
                                        help="Where the compute nodes reach this relay, e.g. 0.0.0.0:8700.")],
    server: Server = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="Do not log each request.")] = False,
) -> None:
    """Forward the run token, heartbeat and submission requests of controllers that cannot reach the
    service (compute nodes without internet) to the service; run it on a login node.

    Controllers point at it: `aiperf-runner run ... --system S --server http://LOGIN-NODE:PORT`.
    Requests go through as they came (the site token and the site key's signatures are the
    controller's), via $HTTPS_PROXY when set. It keeps no state: restarted, it loses nothing.
    Stop it with Ctrl-C.
    """
    from aiperf_runner.client.relay import Relay, RelayError, parse_listen  # httpx: only for this command

    upstream = find_server(server)  # only the address: the token is the controller's
    if upstream is None:
        raise UsageError("no service to relay to: pass --server URL (or set AIPERF_SERVER, or run `register`)")
    try:
        listen_at = parse_listen(listen)
    except RelayError as exc:
        raise UsageError(str(exc)) from None
    relay = Relay(listen_at, upstream)
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format="%(asctime)s %(message)s")
    typer.echo(f"relaying http://{relay.address} -> {upstream}", err=True)
    try:
        relay.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        relay.server_close()
        typer.echo(f"relay stopped after {relay.forwarded} request(s)", err=True)


def register(app: typer.Typer) -> None:
    app.command("relay", epilog="Exit codes: 0 stopped, 1 could not start, 2 usage error.")(relay_cmd)
