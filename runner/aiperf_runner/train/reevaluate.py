"""Re-evaluate a trial's uploaded weights, as the service's audit worker does (docs/design.md section 7, layer 3).

    python -m aiperf_runner.train.reevaluate TRIAL_DIR WEIGHTS [--data DIR] [--device cpu|cuda] [--preset NAME]
                                             [--private-seed N]

TRIAL_DIR holds the trial's files from the bundle (`graph.json`, `hparams.json`, `trial.json`).
WEIGHTS is its final weights or a committed training state (train/trainstate.py: its model's tensors count).
The weights are loaded as safetensors (never a pickle) into the module `train/builder.py` builds
from the graph, with `strict=True`: every parameter's name and shape must match, so the graph that
was charged is the graph that was trained. The accuracy is measured on the preset's validation
data (the service's copy: sizes, generator seed and files are the preset's, not the trial's) with the
trial's own data pipeline and evaluation (`train/data.py`, `train/trial.py`). With `--private-seed`, a
generated preset (smoke) is evaluated on a private split instead: as many images of the same
distribution, generated from the service's secret seed, which no runner has read.
Prints one JSON object: {architecture_ok, error, accuracy, images, split}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import torch

from aiperf_runner.data.presets import get_preset
from aiperf_runner.spec.graph import Graph

from .builder import build_module
from .data import DataSpec, build_data
from .precision import setup_precision
from .trial import evaluate
from .weights import load_weights


def audit_trial(trial_dir: Path, weights: Path, data: str | None, device_name: str = "cpu",
                preset_name: str | None = None, private_seed: int | None = None) -> dict[str, Any]:
    trial = json.loads((trial_dir / "trial.json").read_text())
    hparams = json.loads((trial_dir / "hparams.json").read_text())
    graph = Graph.from_json(json.loads((trial_dir / "graph.json").read_text()))
    # The preset's own data as the service holds it (sizes, generator seed, files), never what the
    # site's trial.json says about them.
    preset = get_preset(preset_name or trial.get("preset") or (trial.get("dataset") or {}).get("name") or "smoke")
    spec = DataSpec.audited(trial, preset.dataset(data), data)
    if private_seed is not None and spec.name == "smoke":
        spec = dataclasses.replace(spec, private_seed=private_seed)
    out: dict[str, Any] = {"architecture_ok": False, "error": None, "accuracy": None, "images": 0,
                           "split": "val" if spec.private_seed is None else "private"}
    try:
        state = load_weights(weights)
    except ValueError as exc:
        out["error"] = f"weights: {exc}"
        return out
    if state and all(k.startswith(("model/", "momentum/")) for k in state):  # a committed state (trainstate.py)
        state = {k[len("model/"):]: v for k, v in state.items() if k.startswith("model/")}
    model = build_module(graph, num_classes=spec.num_classes, dropout=float(hparams.get("dropout") or 0.0))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        out["error"] = f"the weights do not fit the trial's graph: {str(exc).splitlines()[0]} " \
                       f"({len(state)} tensors in the file, {len(model.state_dict())} in the graph's module)"
        return out
    out["architecture_ok"] = True
    device = torch.device(device_name)
    model.to(device)
    batch = int(hparams.get("batch_size") or 128)
    val = build_data(spec, batch_size=batch, rank=0, world_size=1, device=device, shuffle_seed=0)
    totals = evaluate(model, val, setup_precision("fp32", device), device).tolist()
    out["images"] = int(round(totals[0]))
    out["accuracy"] = totals[1] / totals[0] if totals[0] else 0.0
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aiperf_runner.train.reevaluate",
                                     description="Re-evaluate a trial's weights on the preset's validation data.")
    parser.add_argument("trial_dir", type=Path)
    parser.add_argument("weights", type=Path)
    parser.add_argument("--data", default=None, help="the preset's data directory (smoke: none, generated)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", default=None, help="the result's preset (default: the trial's)")
    parser.add_argument("--private-seed", type=int, default=None,
                        help="a generated preset (smoke): evaluate on the private split of this seed")
    args = parser.parse_args(argv)
    try:
        result = audit_trial(args.trial_dir, args.weights, args.data, args.device, args.preset, args.private_seed)
    except Exception as exc:  # noqa: BLE001 - reported to the service as the audit's error
        result = {"architecture_ok": False, "error": f"{type(exc).__name__}: {exc}", "accuracy": None, "images": 0}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
