"""`aiperf-runner preflight`: measure one node (torch start-up, the seed trial on its devices, JPEG decoding per
core; with --workload llm the seed transformer's tokens/s) and predict its training rate and score range before a
reservation is booked."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from aiperf_runner.cli.options import format_ops
from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.estimate import MEASURED_LOW_REASON, MEASURED_LOW_SHARE, measured_mfu, measured_score_range


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def preflight_cmd(
    preset: Annotated[str | None, typer.Option("--preset", help="The preset (default: imagenet, the official one; "
                                                                "with --workload llm: llm).")] = None,
    workload: Annotated[str, typer.Option("--workload", help="image (the default) or llm (AIPerf-LLM: the seed "
                                                             "transformer's tokens/s; no decoding).")] = "image",
    batch_tokens: Annotated[int, typer.Option("--batch-tokens", min=0, help="--workload llm: tokens per step (0: "
                                                                            "the preset's smallest batch on a GPU, "
                                                                            "on a CPU at most 8,192).")] = 0,
    precision: Annotated[str, typer.Option("--precision", help="auto (bf16 on a GPU, else fp32), fp32, tf32, bf16 "
                                                                "or fp16.")] = "auto",
    batch: Annotated[int, typer.Option("--batch", min=0, help="Images per step of the seed trial (0: 256 on a GPU, "
                                                              "16 on a CPU).")] = 0,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Timed steps of the seed trial.")] = 20,
    data: Annotated[Path | None, typer.Option("--data", help="Time decoding on a sample of this ImageFolder's "
                                                              "JPEGs instead of images made here.")] = None,
    images: Annotated[int, typer.Option("--images", min=1, help="JPEGs decoded per pass.")] = 100,
    decode_seconds: Annotated[float, typer.Option("--decode-seconds", min=0.1, help="Seconds each decoder is "
                                                                                    "timed.")] = 3.0,
    nodes: Annotated[int, typer.Option("--nodes", min=1, help="Nodes the run will use (the prediction scales "
                                                              "linearly: an assumption).")] = 1,
    decoded: Annotated[bool, typer.Option("--decoded", help="Predict for data staged decoded (stage --decoded: "
                                                           "the loaders do not decode).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")] = False,
) -> None:
    """Measure this node and predict a run: torch's import time, the preset's seed trial on the node's device
    (time to its first step, images/s), training-transform images/s per CPU core for each decoder (from the
    JPEGs, and from a pixel pack of them), the node's expected training rate (the slower of its devices and its
    CPUs) and a score range for --nodes such nodes."""
    import torch

    from aiperf_runner.data.presets import PresetError, get_preset
    from aiperf_runner.rundir.config import DATA_DECODERS
    from aiperf_runner.spec.llmrules import LLM_PRESETS
    from aiperf_runner.train import preflight as pf
    from aiperf_runner.train.decode import default_decoder

    if workload not in ("image", "llm"):
        raise AiperfError(f"unknown --workload {workload!r} (expected image or llm)")
    preset = preset or ("llm" if workload == "llm" else "imagenet")
    if workload == "llm" or preset in LLM_PRESETS:
        llm = _llm_preflight(preset, precision, batch_tokens, steps, nodes)
        typer.echo(json.dumps(llm, indent=2) if as_json else llm_text(llm))
        return
    try:
        p = get_preset(preset)
    except (PresetError, KeyError) as exc:
        raise AiperfError(str(exc).strip("'")) from None
    cuda = torch.cuda.is_available()
    device = torch.device("cuda:0" if cuda else "cpu")
    precision = ("bf16" if cuda else "fp32") if precision == "auto" else precision.lower()
    batch = batch or (256 if cuda else 16)
    devices = torch.cuda.device_count() if cuda else 1
    out: dict[str, Any] = {"preset": preset, "device": torch.cuda.get_device_name(0) if cuda else "cpu",
                           "devices": devices, "cores": _cores(), "nodes": nodes,
                           "torch_import_s": pf.torch_import_s()}
    speed = pf.seed_trial_speed(preset, device, precision, batch, steps)
    out["seed_trial"] = {"precision": speed.precision, "batch": speed.batch, "first_step_s": speed.first_step_s,
                         "images_per_s": speed.images_per_s, "train_flops_per_image": speed.train_flops_per_image}
    compute = speed.images_per_s * devices
    out["compute_images_per_s"] = compute
    decoder = default_decoder()
    node = compute
    if p.data_format == "folder":
        if decoded and decoder == "device":
            raise AiperfError("--decoded: a pixel pack holds the images of tensor or pil, not the device decoder's "
                              "(it decodes in the run): set AIPERF_DATA_DECODER")
        out["decode"] = pf.decode_rates(DATA_DECODERS, p.name, p.image_size, data, images, decode_seconds, device)
        # A GPU node keeps a core per device for its training process; the rest decode.
        loader_cores = max(1, out["cores"] - devices) if cuda else out["cores"]
        feed = out["decode"]["per_core_decoded" if decoded else "per_core"][decoder] * loader_cores
        if decoder == "device":  # the workers draw the crops; each device decodes its own batches
            feed = min(feed, out["decode"]["on_device"] * devices)
        out.update(decoder=decoder, decoded=decoded, loader_cores=loader_cores, data_images_per_s=feed)
        node = min(compute, feed)
    out["node_images_per_s"] = node
    out["limited_by"] = "data" if node < compute else "compute"
    out["score_ops"] = measured_score_range(node, speed.train_flops_per_image, nodes)
    out["assumptions"] = [
        f"the seed's v2 FLOPs per trained image ({speed.train_flops_per_image / 1e9:.3g} GFLOP) at the node's "
        "training rate; validation runs at about the same FLOP rate",
        f"low end {MEASURED_LOW_SHARE:g} x the high end: {MEASURED_LOW_REASON}",
        f"{nodes} node(s) scale linearly (an assumption)" if nodes > 1 else "one node",
    ]
    typer.echo(json.dumps(out, indent=2) if as_json else text(out))


def _llm_preflight(preset: str, precision: str, batch_tokens: int, steps: int, nodes: int) -> dict[str, Any]:
    """The AIPerf-LLM preset's seed model on this node's device: first step, tokens/s, MFU, a score range."""
    import torch

    from aiperf_runner.spec import peaks
    from aiperf_runner.spec.llmrules import llm_preset
    from aiperf_runner.train import preflight as pf
    from aiperf_runner.train.llm.preflight import seed_speed

    p = llm_preset(preset)  # LlmPresetError (exit 1) names the known ones
    cuda = torch.cuda.is_available()
    if precision not in ("auto", "bf16" if cuda else "fp32"):
        raise AiperfError(f"--workload llm trains in {'bf16' if cuda else 'fp32'} here (the trainer's autocast): "
                          "leave --precision at auto")
    device = torch.device("cuda:0" if cuda else "cpu")
    # The preset's smallest batch; on a CPU at most 8,192 tokens (the production preset's 65,536 take minutes a step)
    batch_tokens = batch_tokens or (p.batch_tokens[0] if cuda or p.batch_tokens[0] <= 8192 else 4 * p.seed_arch.seq_len)
    devices = torch.cuda.device_count() if cuda else 1
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    out: dict[str, Any] = {"workload": "llm", "preset": preset, "device": name, "devices": devices,
                           "cores": _cores(), "nodes": nodes, "torch_import_s": pf.torch_import_s()}
    speed = seed_speed(preset, device, batch_tokens, steps)
    known = peaks.lookup(name) if cuda else None
    device_peak = known.peak_flops(speed.precision) if known is not None else None
    out["seed_trial"] = {"precision": speed.precision, "batch_tokens": speed.batch_tokens,
                         "first_step_s": speed.first_step_s, "tokens_per_s": speed.tokens_per_s,
                         "train_flops_per_token": speed.train_flops_per_token,
                         "mfu": measured_mfu(speed.tokens_per_s, speed.train_flops_per_token, device_peak)}
    out["node_tokens_per_s"] = speed.tokens_per_s * devices
    out["score_ops"] = measured_score_range(out["node_tokens_per_s"], speed.train_flops_per_token, nodes)
    out["assumptions"] = [
        f"the seed's llm-v1 training FLOPs per token ({speed.train_flops_per_token / 1e6:,.4g} MFLOP) at the node's "
        "rate, every device training its own trial (DDP inside a slot is not measured)",
        f"low end {MEASURED_LOW_SHARE:g} x the high end: {MEASURED_LOW_REASON}",
        f"{nodes} node(s) scale linearly (an assumption)" if nodes > 1 else "one node",
    ]
    if device_peak is None:
        out["assumptions"].append("no MFU: this device is not in the peak table" if cuda else
                                  "no MFU on a CPU (its peak is the rules' estimate, not a datasheet's)")
    return out


def llm_text(d: dict[str, Any]) -> str:
    t = d["seed_trial"]
    mfu = f", MFU {t['mfu']:.1%}" if t["mfu"] is not None else ""
    lines = [f"node:            {d['devices']} x {d['device']}, {d['cores']} CPU cores; AIPerf-LLM preset {d['preset']}",
             f"torch import:    {d['torch_import_s']:.2f} s (a cold trial process pays it)",
             f"seed trial:      first step {t['first_step_s']:.2f} s after the model is built; "
             f"{t['tokens_per_s']:,.0f} tokens/s per device ({t['precision']}, {t['batch_tokens']:,} tokens a step{mfu})",
             f"node rate:       {d['node_tokens_per_s']:,.0f} tokens/s",
             f"expected score:  {format_ops(d['score_ops'][0])} - {format_ops(d['score_ops'][1])} on {d['nodes']} node(s)",
             "assumptions:"]
    lines += [f"  - {a}" for a in d["assumptions"]]
    return "\n".join(lines)


def text(d: dict[str, Any]) -> str:
    t = d["seed_trial"]
    lines = [
        f"node:            {d['devices']} x {d['device']}, {d['cores']} CPU cores; preset {d['preset']}",
        f"torch import:    {d['torch_import_s']:.2f} s (a cold trial process pays it)",
        f"seed trial:      first step {t['first_step_s']:.2f} s after the model is built; "
        f"{t['images_per_s']:.1f} images/s per device ({t['precision']}, batch {t['batch']})",
    ]
    if "decode" in d:
        per_core = ", ".join(f"{name} {rate:.0f}" for name, rate in d["decode"]["per_core"].items())
        decoded = ", ".join(f"{name} {rate:.0f}" for name, rate in d["decode"]["per_core_decoded"].items())
        source = "a pixel pack (stage --decoded)" if d["decoded"] else "the JPEGs"
        lines += [f"decoding:        images/s per core of the training transform: {per_core} "
                  f"({d['decode']['images']} JPEGs, {d['decode']['mean_bytes'] / 1024:.0f} kB mean, "
                  f"{d['decode']['source']}); from a pixel pack of them (stage --decoded): {decoded}",
                  *([f"device decoder:  {d['decode']['on_device']:.0f} images/s of its batches' share on {d['device']} "
                     "(imagenet's JPEGs decoded and cropped there; per core above: the workers' share)"]
                    if "on_device" in d["decode"] else []),
                  f"data feed:       {d['data_images_per_s']:.0f} images/s ({d['decoder']} on {d['loader_cores']} "
                  f"cores, from {source})"]
    lines += [f"node rate:       {d['node_images_per_s']:.1f} images/s, limited by {d['limited_by']}",
              f"expected score:  {format_ops(d['score_ops'][0])} - {format_ops(d['score_ops'][1])} on {d['nodes']} node(s)",
              "assumptions:"]
    lines += [f"  - {a}" for a in d["assumptions"]]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    app.command("preflight", epilog="Exit codes: 0 success, 1 unknown preset or unreadable data, 2 usage error.")(
        preflight_cmd)
