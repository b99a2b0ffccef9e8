"""Starting an AIPerf-LLM run (run/llmrun.py), the steps before its loop: the preset's data checked (a shard
preset's manifest verified before the clock starts), the backend opened (run/llmlaunch.py) and the config completed
from its slots, run.json written (the machine and the backend's facts, the witness's token), and a killed run's
config read back for `--resume`.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiperf_runner import __version__
from aiperf_runner.backends.base import Backend, Slot
from aiperf_runner.run import llmlaunch, llmwitness
from aiperf_runner.rundir import privacy, recorded
from aiperf_runner.rundir.privacy import read_private
from aiperf_runner.spec import SPEC_VERSION
from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.llmrules import LLM_PRESETS, RULES, WORKLOAD, LlmPreset

if TYPE_CHECKING:
    from aiperf_runner.client.service import Service


class LlmRunError(AiperfError, RuntimeError):
    """An LLM run that cannot start."""


@dataclass
class LlmRunConfig:
    preset: str = "llm-smoke"
    slots: int = 1  # 0: the backend's own default (slurm: as many as the usable nodes hold)
    duration_s: float | None = None
    seed: int = 0
    devices_per_slot: int = 0  # 0: this machine's cores (or GPUs) shared out between the slots
    max_retries: int = 1
    trial_module: str = "aiperf_runner.train.llm.trialmain"  # the trial program (tests run dishonest ones)
    data: str | None = None  # a shard preset's token shards (data/llmshards.py); the byte presets make their text
    rehearsal: bool = False  # run --rehearsal: on a rehearsal token (never ranked; submit --rehearsal)
    backend: str = "local"  # where trials run (backends/: local, slurm, or an installed plugin)
    backend_options: dict[str, Any] = field(default_factory=dict)  # --backend-opt and the slurm options


def trial_argv(config: LlmRunConfig) -> tuple[str, ...]:
    """The trial program without its per-attempt argument (Backend.prepare)."""
    return (sys.executable, "-m", config.trial_module)


def open_backend(config: LlmRunConfig, run_dir: Path) -> tuple[Backend, list[Slot]]:
    """The run's backend and slots; the config gets the slots and the processes per slot they have. The local
    backend's default devices per slot are the LLM run's (every GPU, or every core, shared out between the slots)."""
    devices = config.devices_per_slot or (devices_per_slot(config.slots or 1) if config.backend == "local" else 0)
    try:
        backend, slots = llmlaunch.open_backend(config.backend, config.backend_options, run_dir, config.slots or None,
                                                devices or None)
    except llmlaunch.LlmBackendError as exc:
        raise LlmRunError(str(exc)) from None
    config.slots, config.devices_per_slot = len(slots), slots[0].world_size
    return backend, slots


def new_run_json(config: LlmRunConfig, preset: LlmPreset, dataset: dict[str, Any], run_dir: Path, backend: Backend,
                 slots: list[Slot], service: Service | None, registration: Mapping[str, Any] | None
                 ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """run.json written (and the run token of a witnessed run): the machine as for image runs (accelerators
    used, CPU, software, the backend's facts such as `system.slurm`, host names masked) and its peak at the
    trainer's precision (bf16 autocast on CUDA, fp32 on a CPU: train/llm/trainer.py) for the efficiency column.
    The site's backend options (account, prologue...) and the data directory go to local/private.json."""
    masker, public = privacy.start_run(run_dir, {"data": config.data, "backend_options": config.backend_options},
                                       backend.known_hosts())
    system, peaks, peak_sources = llmlaunch.describe_system(backend, slots, masker)
    device_type = slots[0].device_type
    run_json = {
        "workload": WORKLOAD, "run_id": secrets.token_hex(16), "preset": preset.name, "rules": RULES,
        "slots": config.slots, "devices_per_slot": config.devices_per_slot, "duration_s": config.duration_s,
        "seed": config.seed, "max_retries": config.max_retries, "runner_version": __version__,
        **({"trial_module": config.trial_module} if config.trial_module != LlmRunConfig.trial_module else {}),
        "spec_version": SPEC_VERSION, "dataset": dataset, "device_type": device_type,
        "precision": "bf16" if device_type == "cuda" else "fp32", "system": system,
        "declared_peak_flops": peaks, "declared_peak_source": peak_sources, "created_at": time.time(),
        # What a run token binds, where an image run's run.json keeps it (spec/witness.py TOKEN_BOUND), and the
        # backend as an image run's config records it.
        "config": {"slots": config.slots, "devices_per_slot": config.devices_per_slot,
                   "duration_s": config.duration_s, "backend": config.backend,
                   "backend_options": public["backend_options"], **({"rehearsal": True} if config.rehearsal else {})},
    }
    token = None
    if service is not None and registration is not None:
        system.update(id=registration["id"], registration=dict(registration),
                      name=system.get("name") or registration.get("name") or "")
        token = llmwitness.ask(service, registration, run_json)
        recorded.record_witness(run_dir, token)  # for the site's own verify; the service has its own
        run_json["run_id"] = token["run_id"]
    (run_dir / "run.json").write_text(json.dumps(run_json, indent=2, sort_keys=True) + "\n")
    return run_json, token


def resumed_config(run_dir: Path, run_json: dict[str, Any]) -> LlmRunConfig:
    """The config of a run to resume, from its run.json (and local/private.json's backend options). A run.json
    written before LLM runs had backends names none: local."""
    saved = run_json.get("config") or {}
    options = {**(saved.get("backend_options") or {}), **(read_private(run_dir).get("backend_options") or {})}
    return LlmRunConfig(preset=run_json["preset"], slots=run_json["slots"], duration_s=run_json["duration_s"],
                        seed=run_json["seed"], devices_per_slot=run_json["devices_per_slot"],
                        max_retries=run_json.get("max_retries", 1),
                        trial_module=run_json.get("trial_module", LlmRunConfig.trial_module),
                        rehearsal=bool(saved.get("rehearsal")), backend=str(saved.get("backend") or "local"),
                        backend_options=options)


def device_type_here() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def devices_per_slot(slots: int) -> int:
    """GPUs per slot with CUDA, else this machine's cores shared out (one process of one thread each)."""
    if device_type_here() == "cuda":
        import torch

        return max(1, torch.cuda.device_count() // slots)
    return max(1, (os.cpu_count() or 1) // slots)


def check_data(preset: LlmPreset) -> None:
    """Fail before the clock starts when the preset's text cannot be had here (rather than in every trial)."""
    from aiperf_runner.data.llmtext import KJV_NAME, TextError, kjv_text

    if preset.data == KJV_NAME:
        try:
            kjv_text()
        except TextError as exc:
            raise LlmRunError(f"{preset.name}: {exc}") from None


def check_shards(preset: LlmPreset, data: str | None, say: Callable[[str], None]) -> dict[str, Any]:
    """run.json's `dataset` block: the preset's; for a shard preset with the facts of the manifest in `data`, which
    is verified here, before the clock starts (every shard re-hashed: the time is printed, not scored)."""
    if preset.shards is None:
        if data is not None:
            raise LlmRunError(f"{preset.name} makes its own text: --data is for the shard presets "
                              f"({', '.join(n for n, p in LLM_PRESETS.items() if p.shards is not None)})")
        return preset.to_json()
    from aiperf_runner.data import llmshards

    if data is None:
        raise LlmRunError(f"{preset.name} trains on token shards: give --data DIR, a directory of llm.c .bin shards "
                          f"with their manifest {llmshards.MANIFEST} (`aiperf-runner stage --workload llm`)")
    start = time.monotonic()
    try:
        manifest = llmshards.verify(data)
        dataset = llmshards.check_preset(manifest, preset)
    except llmshards.ShardError as exc:
        raise LlmRunError(f"{preset.name}: {exc}") from None
    say(f"data: {dataset['train_shards'] + dataset['val_shards']} shards, {dataset['train_tokens']:,} training and "
        f"{dataset['val_tokens']:,} validation tokens ({dataset['tokenizer']}), manifest {dataset['digest'][:16]}... "
        f"verified in {time.monotonic() - start:.1f} s (before the clock: not scored)")
    return dataset


def resumed_shards(run_dir: Path, preset: LlmPreset, run_json: dict[str, Any]) -> str:
    """A resumed shard run's data directory (local/private.json), its manifest still the run's (read, not
    re-hashed: the clock runs; every trial checks the shards' headers and sizes)."""
    from aiperf_runner.data import llmshards

    data = read_private(run_dir).get("data")
    if not data:
        raise LlmRunError(f"{run_dir}: the run's shard directory is not recorded (local/private.json data)")
    try:
        manifest = llmshards.read_manifest(data)
    except llmshards.ShardError as exc:
        raise LlmRunError(f"{preset.name}: {exc}") from None
    if manifest["digest"] != (run_json.get("dataset") or {}).get("digest"):
        raise LlmRunError(f"{data}: its manifest is not the one this run verified (digest "
                          f"{manifest['digest'][:16]}...)")
    return str(data)
