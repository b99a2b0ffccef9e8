"""`aiperf-runner flops GRAPH.json`: analytic FLOPs per image of an architecture graph (torch-free)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.flops import DEFAULT_RULES, RULES, flops_per_image
from aiperf_runner.spec.graph import Graph, GraphError


def flops(
    graph_path: Path = typer.Argument(..., metavar="GRAPH.json",
                                      help="Architecture graph, native (aiperf-graph/1) or AIPerf layer_list format."),
    rules: str = typer.Option(DEFAULT_RULES, "--rules", help=f"FLOP rules: {' or '.join(RULES)}."),
    kernel_size: int = typer.Option(3, "--kernel-size", min=1,
                                    help="Trial kernel_size hyper-parameter (v1-compat's quirk for convs past position 175)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    per_layer: bool = typer.Option(False, "--per-layer", help="Include per-layer forward/backward counts."),
) -> None:
    """Count eval (forward) and train (forward + backward) FLOPs per image of a graph."""
    if rules not in RULES:
        raise AiperfError(f"unknown --rules {rules!r} (expected {' or '.join(RULES)})")
    try:
        data = json.loads(graph_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AiperfError(f"cannot read {graph_path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise AiperfError(f"{graph_path} is not JSON: {exc}") from None
    try:
        if not isinstance(data, dict):
            raise GraphError("a graph must be a JSON object")
        graph = Graph.from_json(data)
        counts = flops_per_image(graph, rules=rules, kernel_size=kernel_size, per_layer=per_layer)
    except GraphError as exc:
        raise AiperfError(f"invalid graph {graph_path}: {exc}") from None
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise AiperfError(f"malformed graph {graph_path}: {type(exc).__name__}: {exc}") from None
    if as_json:
        out = counts.to_json(per_layer=per_layer)
        out["layers"] = len(graph.layers)
        out["graph_hash"] = graph.hash()
        typer.echo(json.dumps(out, sort_keys=True))
        return
    typer.echo(f"rules            {counts.rules}" + (f" (kernel_size {counts.kernel_size})" if rules == "v1-compat" else ""))
    typer.echo(f"layers           {len(graph.layers)}")
    typer.echo(f"eval  FLOP/image {counts.eval:,}")
    typer.echo(f"train FLOP/image {counts.train:,}  (forward {counts.forward:,} + backward {counts.backward:,})")
    if per_layer and counts.per_layer is not None:
        typer.echo("")
        typer.echo(f"{'layer':>6}  {'type':<17} {'forward':>16} {'backward':>16}")
        for x in counts.per_layer:
            idx = "-" if x.index is None else str(x.index)
            typer.echo(f"{idx:>6}  {x.type:<17} {float(x.forward):>16,.0f} {float(x.backward):>16,.0f}")


def register(app: typer.Typer) -> None:
    app.command("flops")(flops)
