"""Re-evaluate an AIPerf-LLM trial's uploaded weights, as the service's audit worker does (leaderboard/llmaudit.py;
docs/rules.md, "AIPerf-LLM").

    python -m aiperf_runner.train.llm.reevaluate ARCH WEIGHTS --preset NAME [--device cpu|cuda]
        [--data DIR [--digest HEX]]

ARCH is the trial's architecture: a JSON file holding an `LlmArch` dict as the log's `trial_proposed` line
records it (`arch`; the service writes it from the verified log), or a trial's `trial.json` (its `arch`), or
the trial's directory (its `trial.json`). WEIGHTS is the trial's `weights.safetensors`: loaded as safetensors
(never a pickle) into the model `model.py` builds from the architecture, with `strict=True`, so every tensor's
name and shape must match. The validation loss is the trainer's own frozen evaluation (`trainer.evaluate`) of
the preset's validation text as the runner makes it (`trialmain.preset_data`: llm-smoke generated, llm-kjv
extracted from Debian's bible-kjv; both checked against the preset's digests), never text the site sent. A
shard preset (`llm`, `llm-bytes`) cannot be made here: its validation tokens come from `--data DIR`, a directory
holding the corpus's manifest `aiperf-llm-shards.json` and at least its validation shards (the training shards
may be absent: the manifest's digest binds them all the same), checked against the preset's binding, every
validation shard re-hashed, and with `--digest` (the run's `dataset.digest`) the manifest must be the run's. On
the CPU (the default) it runs in fp32; on CUDA the evaluation runs under bf16 autocast, as a GPU trainer's.

Prints one JSON object: {architecture_ok, error, data_error, val_loss, targets, sha256, preset, split}.
`error` begins with "weights:" when the file is not a readable safetensors file; `data_error` says why the
preset's text could not be made here (missing packages, other digests, no or other shards): the service's fault,
not the site's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from aiperf_runner.data import llmshards
from aiperf_runner.spec.llmflops import LlmArch
from aiperf_runner.spec.llmrules import LlmPreset, llm_preset

from ..weights import file_sha256, load_weights
from .model import build_model
from .trainer import evaluate
from .trialmain import preset_data


def read_arch(path: Path) -> LlmArch:
    """The architecture in `path`: an LlmArch dict, a trial.json (its `arch`), or a trial directory."""
    if path.is_dir():
        path = path / "trial.json"
    doc = json.loads(path.read_text())
    return LlmArch.from_dict(doc["arch"] if isinstance(doc, dict) and "arch" in doc else doc)


def _verdict(weights: Path, preset: str) -> dict[str, Any]:
    return {"architecture_ok": False, "error": None, "data_error": None, "val_loss": None, "targets": 0,
            "sha256": file_sha256(weights), "preset": preset, "split": "val"}


def validation_data(preset: LlmPreset, data: Path | None = None, digest: str | None = None) -> bytes | np.ndarray:
    """The preset's validation text (bytes), or a shard preset's validation tokens from the shards at `data`
    (an array); ValueError when they cannot be had here or are not the preset's (or the run's: `digest`)."""
    if preset.shards is None:
        return preset_data(preset).val
    if data is None:
        raise ValueError(f"{preset.name}: its validation shards are not on this machine: give --data DIR (the "
                         f"corpus's {llmshards.MANIFEST} and its validation shards)")
    llmshards.verify(data, full=True, splits=("val",))
    return llmshards.open_for_preset(data, preset, digest, train=False).val


def audit_weights(arch: LlmArch, weights: Path, preset_name: str, device_name: str = "cpu",
                  data: Path | None = None, digest: str | None = None) -> dict[str, Any]:
    """The verdict on `weights` for `arch`: loaded strictly, then evaluated on the preset's validation text
    (a shard preset's: from the shards at `data`, whose manifest must have `digest` when given)."""
    out = _verdict(weights, preset_name)
    try:  # first: without the text the audit cannot conclude, whatever the weights
        val = validation_data(llm_preset(preset_name), data, digest)
    except ValueError as exc:  # TextError (packages missing), digests other than the preset's, ShardError
        out["data_error"] = str(exc)
        return out
    try:
        state = load_weights(weights)
    except ValueError as exc:
        out["error"] = f"weights: {exc}"
        return out
    model = build_model(arch)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        out["error"] = (f"the weights do not fit the trial's architecture: {str(exc).splitlines()[0]} "
                        f"({len(state)} tensors in the file, {len(model.state_dict())} in the architecture's model)")
        return out
    out["architecture_ok"] = True
    device = torch.device(device_name)
    loss = evaluate(model.to(device), val, device=device)
    out["targets"] = len(val) - 1  # every byte (token) but the first, once (trainer.eval_windows)
    if math.isfinite(loss):
        out["val_loss"] = loss
    else:
        out["error"] = f"the validation loss of these weights is {loss}"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aiperf_runner.train.llm.reevaluate",
                                     description="Re-evaluate an LLM trial's weights on its preset's validation text.")
    parser.add_argument("arch", type=Path, help="an LlmArch JSON file, a trial.json, or a trial directory")
    parser.add_argument("weights", type=Path)
    parser.add_argument("--preset", required=True, help="the result's preset (llm-smoke, llm-kjv, llm, llm-bytes)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data", type=Path, default=None,
                        help="a shard preset's corpus: the directory of its manifest and validation shards")
    parser.add_argument("--digest", default=None, help="the run's dataset.digest: the manifest at --data must have it")
    args = parser.parse_args(argv)
    try:
        result = audit_weights(read_arch(args.arch), args.weights, args.preset, args.device, args.data, args.digest)
    except Exception as exc:  # noqa: BLE001 - reported to the service as the audit's error
        result = {"architecture_ok": False, "error": f"{type(exc).__name__}: {exc}", "val_loss": None}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
