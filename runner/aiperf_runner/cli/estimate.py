"""`aiperf-runner estimate`: node-hours, the expected score range and a slots split, before a run."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from aiperf_runner.cli.options import format_ops, parse_duration
from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.estimate import STAGE_BYTES_PER_S, STARTUP_S, about_minutes


def estimate_cmd(
    accelerator_model: Annotated[str, typer.Option("--accelerator-model", metavar="M",
                                                   help="A model of the peak table (spec/peaks.py), e.g. 'H100', "
                                                        "'A100 80GB', 'MI250X'; an unknown one lists them.")],
    accelerators_per_node: Annotated[int, typer.Option("--accelerators-per-node", metavar="K", min=1)],
    nodes: Annotated[int, typer.Option("--nodes", metavar="N", min=1)],
    duration: Annotated[str, typer.Option("--duration", help="Run length, e.g. 2h, 90m, 12h.")] = "2h",
    precision: Annotated[str, typer.Option("--precision", help="fp32, tf32, bf16 or fp16.")] = "bf16",
    preset: Annotated[str | None, typer.Option("--preset", help="The preset (default: imagenet, the official one; "
                                                                "with --workload llm: llm).")] = None,
    workload: Annotated[str, typer.Option("--workload", help="image (the default) or llm (AIPerf-LLM).")] = "image",
    startup_s: Annotated[float, typer.Option("--startup-s", min=0, help="Seconds from a trial attempt's launch to "
                                                                     "its first step (measure with preflight).")
                         ] = STARTUP_S,
    data_gb: Annotated[float | None, typer.Option("--data-gb", min=0, help="The data set's size to stage "
                                                                          "(default: the preset's; with "
                                                                          "--workload llm its bound tokens).")] = None,
    stage_mbps: Annotated[float, typer.Option("--stage-mbps", min=1, help="MB/s one node stages at.")] = (
        STAGE_BYTES_PER_S / 1e6),
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")] = False,
) -> None:
    """Estimate a run: node-hours, the expected score range (peak x the efficiency range of the preset's
    reference measurement, with every assumption and its source) and a suggested slots / nodes-per-slot split."""
    from aiperf_runner.data.presets import get_preset
    from aiperf_runner.spec.estimate import estimate
    from aiperf_runner.spec.flops import flops_per_image
    from aiperf_runner.spec.llmrules import LLM_PRESETS
    from aiperf_runner.spec.seeds import seed_for_preset

    if workload not in ("image", "llm"):
        raise AiperfError(f"unknown --workload {workload!r} (expected image or llm)")
    preset = preset or ("llm" if workload == "llm" else "imagenet")
    if workload == "llm" or preset in LLM_PRESETS:
        llm = _llm_estimate(accelerator_model, accelerators_per_node, nodes, duration, precision, preset, startup_s,
                            data_gb, stage_mbps)
        typer.echo(json.dumps(llm, indent=2) if as_json else text(llm))
        return
    try:
        p = get_preset(preset)
        flops = flops_per_image(seed_for_preset(preset), "v2")
        data = estimate(accelerator_model=accelerator_model, accelerators_per_node=accelerators_per_node, nodes=nodes,
                        duration_s=parse_duration(duration), precision=precision.lower(), preset=preset,
                        train_flops=float(flops.train), eval_flops=float(flops.eval),
                        first_budget=int(p.epoch_budgets[0]), budgets=tuple(p.epoch_budgets), startup_s=startup_s,
                        data_bytes=data_gb * 1e9 if data_gb is not None else None,
                        stage_bytes_per_s=stage_mbps * 1e6)
    except (ValueError, KeyError) as exc:  # KeyError's message comes quoted
        raise AiperfError(str(exc).strip("'")) from None
    typer.echo(json.dumps(data, indent=2) if as_json else text(data))


def _llm_estimate(accelerator_model: str, accelerators_per_node: int, nodes: int, duration: str, precision: str,
                  preset: str, startup_s: float, data_gb: float | None, stage_mbps: float) -> dict[str, Any]:
    """An AIPerf-LLM run's estimate (spec/llmestimate.py): a score range for the production preset."""
    from aiperf_runner.spec.llmestimate import llm_estimate

    try:
        return llm_estimate(accelerator_model=accelerator_model, accelerators_per_node=accelerators_per_node,
                            nodes=nodes, duration_s=parse_duration(duration), precision=precision.lower(),
                            preset=preset, startup_s=startup_s,
                            data_bytes=data_gb * 1e9 if data_gb is not None else None,
                            stage_bytes_per_s=stage_mbps * 1e6)
    except ValueError as exc:
        raise AiperfError(str(exc)) from None


def text(d: dict[str, Any]) -> str:
    lines = [
        f"machine:        {d['nodes']} node{'s' if d['nodes'] != 1 else ''} x {d['accelerators_per_node']} {d['accelerator']} "
        f"({d['accelerators']} accelerators), {d['precision']}, preset {d['preset']}",
        f"duration:       {d['duration_s'] / 3600:g} h = {d['node_hours']:g} node-hours "
        f"({d['accelerator_hours']:g} accelerator-hours)",
        f"peak:           {format_ops(d['peak_flops'])}",
    ]
    if d["score_ops"]:
        low, high = d["efficiency"]
        lines.append(f"expected score: {format_ops(d['score_ops'][0])} - {format_ops(d['score_ops'][1])} "
                     f"(efficiency {low:.1%} - {high:.1%} of peak)")
        s = d["split"]
        lines.append(f"suggested:      --slots {s['slots']} --nodes-per-slot {s['nodes_per_slot']} "
                     f"--gpus-per-node {d['accelerators_per_node']}")
        lines.append(f"                {s['reason']}")
        lines.append(f"trials:         about {d['trials_per_slot'][0]}-{d['trials_per_slot'][1]} a slot, each "
                     f"{d['startup_s']:.0f} s from launch to its first step (not counted)")
    if d.get("staging_s") is not None:
        lines.append(f"staging:        {about_minutes(d['staging_s'])} before the run (aiperf-runner stage; "
                     "not on the run's clock)")
    lines.append("assumptions:")
    lines += [f"  - {a}" for a in d["assumptions"]]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    app.command("estimate", epilog="Exit codes: 0 success, 1 unknown accelerator or bad values, 2 usage error.")(
        estimate_cmd)
