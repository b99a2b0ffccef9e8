"""`aiperf-runner system add` / `system list`: the systems a site registers with the service.

A registered system is what a result is judged by: its accelerator model and count give the peak
(the service's table, never the log's declaration). Run with `aiperf-runner run --system ID_OR_NAME`.
The nodes' CPU, cores and memory come from the cluster where SLURM answers (its node records and a
probe job), not from the login node the command runs on; the command says which it used.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer

from aiperf_runner.cli.options import AsJson, Server, Token
from aiperf_runner.client.service import add_system, find_service, list_systems
from aiperf_runner.spec.errors import AiperfError


class FactsFrom(StrEnum):
    auto = "auto"
    slurm = "slurm"
    here = "here"


class NodeFactsError(AiperfError):
    """The node facts cannot be taken from where they were asked for (no SLURM; nodes that differ)."""


app = typer.Typer(help="Register the site's systems with the AIPerf service and list them.", no_args_is_help=True)


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
    cpu_model: Annotated[str, typer.Option("--cpu-model", help="The nodes' CPU (default: see --facts-from).")] = "",
    cpu_cores: Annotated[int, typer.Option("--cpu-cores", min=0,
                                           help="CPU cores per node (default: see --facts-from).")] = 0,
    memory_per_node: Annotated[int, typer.Option("--memory-per-node", min=0, metavar="BYTES",
                                                 help="Memory per node in bytes (default: see --facts-from).")] = 0,
    facts_from: Annotated[FactsFrom, typer.Option(
        "--facts-from", help="Where the CPU model, cores and memory per node come from when not given: 'slurm' "
        "(the partition's node records, and a probe job on one of its nodes for the CPU model), 'here' (this "
        "machine), 'auto' (slurm where a SLURM controller answers, else here).")] = FactsFrom.auto,
    partition: Annotated[str, typer.Option("--partition", help="The SLURM partition of the system's nodes "
                                           "(default: the cluster's default partition).")] = "",
    probe: Annotated[bool, typer.Option("--probe/--no-probe", help="With SLURM facts: run a one-task job on a "
                                        "node of the partition to read its CPU model.")] = True,
    server: Server = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Register a system of this site. A model the service's peak table lacks stays pending until a list
    maintainer adds its peak; its results wait outside the official division until then."""
    service = find_service(server, token)  # before a probe job that may wait: a missing token fails at once
    assert service is not None
    given = {"cpu_model": cpu_model, "cpu_cores": cpu_cores, "memory_per_node": memory_per_node}
    facts, source, notes = _node_facts(facts_from, given, partition, probe and not cpu_model,
                                       accelerators_per_node, accelerator_model)
    fields = {"name": name, "accelerator_model": accelerator_model, "accelerators_per_node": accelerators_per_node,
              "nodes": nodes, "interconnect": interconnect, **{k: v or facts[k] for k, v in given.items()}}
    data = add_system(service, fields)
    if as_json:
        typer.echo(json.dumps({**data, "facts_from": source, "notes": notes}, indent=2))
        return
    typer.echo(f"node facts from {source}")
    for note in notes:
        typer.echo(f"note: {note}")
    typer.echo(f"system {data['id']} registered: {_line(data).strip()}")
    if data.get("status") != "approved":
        reason = data.get("status_reason") or "a list maintainer must add this model's peak"
        typer.echo(f"pending: {reason}")


def _node_facts(facts_from: FactsFrom, given: dict[str, Any], partition: str, probe: bool,
                accelerators_per_node: int, accelerator_model: str) -> tuple[dict[str, Any], str, list[str]]:
    """The defaults for the node facts not given, where they came from, and notes (a GPU count that
    differs from SLURM's records)."""
    from aiperf_runner.backends.slurm import nodefacts
    from aiperf_runner.util import sysinfo

    if all(given.values()):
        return given, "the options given", []
    answers = facts_from is not FactsFrom.here and nodefacts.cluster_answers()
    if facts_from is FactsFrom.slurm and not answers:
        raise NodeFactsError("--facts-from slurm, but no SLURM controller answers here (sinfo; is SLURM_CONF set?)")
    if not answers:
        here = sysinfo.host_facts()
        return ({"cpu_model": here["cpu_model"], "cpu_cores": here["cpu_cores"], "memory_per_node": here["memory_bytes"]},
                "this machine (no SLURM controller answered here)" if facts_from is FactsFrom.auto else "this machine", [])
    found = nodefacts.compute_node_facts(partition, probe=probe)
    for label, values, option in (("CPUs", found.cpu_cores, "cpu_cores"), ("memory (MB)", found.memory_mb,
                                                                           "memory_per_node")):
        if len(values) > 1 and not given[option]:
            raise NodeFactsError(f"the nodes of partition {found.partition!r} differ in {label}: "
                                  f"{', '.join(map(str, values))}; give --{option.replace('_', '-')} "
                                  "or a --partition of one kind of node")
    notes = []
    if accelerator_model != "cpu" and found.gpus != (accelerators_per_node,):
        notes.append(f"SLURM's records give the nodes of partition {found.partition!r} "
                     f"{' or '.join(map(str, found.gpus))} GPU(s) each; --accelerators-per-node says "
                     f"{accelerators_per_node}")
    facts = {"cpu_model": found.cpu_model, "cpu_cores": found.cpu_cores[0], "memory_per_node": found.memory_mb[0] << 20}
    return facts, found.describe(), notes


@app.command("list")
def list_cmd(server: Server = None, token: Token = None, as_json: AsJson = False) -> None:
    """The systems this site registered (id, status, name, hardware)."""
    service = find_service(server, token)
    assert service is not None
    systems = list_systems(service)
    if as_json:
        typer.echo(json.dumps(systems, indent=2))
        return
    if not systems:
        typer.echo("no system registered yet: aiperf-runner system add --help")
    for s in systems:
        typer.echo(_line(s))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="system", epilog="Exit codes: 0 done, 1 refused or failed, 2 usage error.")
