"""`aiperf-runner system add` / `system list`: the systems a site registers with the service.

A registered system is what a result is judged by: its accelerator model and count give the peak
(the service's table, never the log's declaration). Run with `aiperf-runner run --system ID_OR_NAME`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from aiperf_runner.cli_submit import AsJson, Server, Token
from aiperf_runner.service import Failure, add_system, find_service, list_systems

app = typer.Typer(help="Register the site's systems with the AIPerf service and list them.", no_args_is_help=True)


def _fail(exc: Exception) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(1)


def _line(s: dict[str, Any]) -> str:
    hw = (f"{s.get('nodes')} x {s.get('cpu_cores') or '?'}-core {s.get('cpu_model') or 'CPU'}"
          if not s.get("accelerators_per_node") else
          f"{s.get('nodes')} node(s) x {s.get('accelerators_per_node')} {s.get('accelerator_model')}")
    return f"{s.get('id'):>5}  {s.get('status', ''):<9} {s.get('name') or '-':<24} {hw}"


@app.command("add")
def add(
    name: Annotated[str, typer.Option("--name", help="The system's name on the list.", show_default=False)],
    accelerator_model: Annotated[str, typer.Option(
        "--accelerator-model", show_default=False,
        help="As the runner records it (e.g. 'NVIDIA H100 80GB HBM3'); 'cpu' for a machine without accelerators.")],
    accelerators_per_node: Annotated[int, typer.Option("--accelerators-per-node", min=0, show_default=False,
                                                       help="0 for a CPU-only machine.")],
    nodes: Annotated[int, typer.Option("--nodes", min=1, show_default=False, help="Nodes in the system.")],
    interconnect: Annotated[str, typer.Option("--interconnect", help="e.g. 'InfiniBand NDR 400'.")] = "",
    cpu_model: Annotated[str, typer.Option("--cpu-model", help="The nodes' CPU (default: this machine's).")] = "",
    cpu_cores: Annotated[int, typer.Option("--cpu-cores", min=0,
                                           help="CPU cores per node (default: this machine's).")] = 0,
    memory_per_node: Annotated[int, typer.Option("--memory-per-node", min=0, metavar="BYTES",
                                                 help="Memory per node in bytes (default: this machine's).")] = 0,
    server: Server = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Register a system of this site. A model the service's peak table lacks stays pending until a list
    maintainer adds its peak; its results wait outside the official division until then."""
    from aiperf_runner import sysinfo

    here = sysinfo.host_facts()
    fields = {"name": name, "accelerator_model": accelerator_model, "accelerators_per_node": accelerators_per_node,
              "nodes": nodes, "interconnect": interconnect, "cpu_model": cpu_model or here["cpu_model"],
              "cpu_cores": cpu_cores or here["cpu_cores"], "memory_per_node": memory_per_node or here["memory_bytes"]}
    try:
        service = find_service(server, token)
        assert service is not None
        data = add_system(service, fields)
    except Failure as exc:
        raise _fail(exc) from None
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    typer.echo(f"system {data['id']} registered: {_line(data).strip()}")
    if data.get("status") != "approved":
        reason = data.get("status_reason") or "a list maintainer must add this model's peak"
        typer.echo(f"pending: {reason}")


@app.command("list")
def list_cmd(server: Server = None, token: Token = None, as_json: AsJson = False) -> None:
    """The systems this site registered (id, status, name, hardware)."""
    try:
        service = find_service(server, token)
        assert service is not None
        systems = list_systems(service)
    except Failure as exc:
        raise _fail(exc) from None
    if as_json:
        typer.echo(json.dumps(systems, indent=2))
        return
    if not systems:
        typer.echo("no system registered yet: aiperf-runner system add --help")
    for s in systems:
        typer.echo(_line(s))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="system", epilog="Exit codes: 0 done, 1 refused or failed, 2 usage error.")
