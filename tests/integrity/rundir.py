"""A small run directory that follows the contracts of docs/internals.md, for integrity tests."""

from __future__ import annotations

import io
import itertools
import json
import tarfile
from pathlib import Path

from aiperf_runner import __version__
from aiperf_runner.spec import SPEC_VERSION
from aiperf_runner.spec.eventlog import EventWriter
from aiperf_runner.spec.graph import Graph
from aiperf_runner.spec.records import EpochEnd
from aiperf_runner.spec.rules import RULES_VERSION

RUN_ID = "0123456789abcdef0123456789abcdef"
T0 = 1_764_530_000.0


def small_graph() -> Graph:
    g = Graph([(3, 16, 16)], [])
    x = g.add_layer("conv2d", [0], in_channels=3, filters=8, kernel_size=3, stride=1, padding=1)
    x = g.add_layer("batchnorm2d", [x], num_features=8)
    x = g.add_layer("relu", [x])
    x = g.add_layer("global_avgpool2d", [x])
    x = g.add_layer("dense", [x], in_units=8, units=10)
    g.add_layer("softmax", [x])
    g.validate()
    return g


def _write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def make_run(root: Path, epochs: int = 3) -> Path:
    """Write run.json, events.jsonl and trials/t0000/ (graph, hparams, trial events) under `root`."""
    clock = itertools.count(T0, 2.0).__next__
    graph = small_graph()
    hparams = {"batch_size": 32, "lr": 0.05, "weight_decay": 5e-4, "label_smoothing": 0.0, "dropout": 0.0}
    dataset = {"name": "smoke", "train_images": 4000, "val_images": 2000, "classes": 10, "image_size": 16}
    _write_json(root / "run.json", {
        "run_id": RUN_ID, "runner_version": __version__, "spec_version": SPEC_VERSION, "rules_version": RULES_VERSION,
        "rules": "v2", "preset": "smoke", "precision": "fp32", "seed": 0, "created_at": T0,
        "config": {"slots": 1, "devices_per_slot": 1, "duration_s": 60, "backend": "local"},
        "system": {"nodes": 1, "cpu_model": "test cpu", "cpu_cores": 2, "accelerators": [],
                   "accelerator_model": "cpu", "accelerator_count": 0, "torch": None, "cuda": None},
        "declared_peak_flops": {"fp32": 1.0e11, "tf32": 1.0e11, "bf16": 1.0e11, "fp16": 1.0e11},
        "dataset": dataset,
    })
    trial = root / "trials" / "t0000"
    trial.mkdir(parents=True)
    (trial / "graph.json").write_text(graph.dumps() + "\n", encoding="utf-8")
    _write_json(trial / "hparams.json", hparams)
    (trial / "stdout.public.log").write_text("epoch 1\n", encoding="utf-8")
    (trial / "stderr.public.log").write_text("", encoding="utf-8")

    with EventWriter(root / "events.jsonl", clock=clock) as log, \
         EventWriter(trial / "events.jsonl", clock=clock) as tlog:
        log.append("run_started", run_id=RUN_ID, preset="smoke", rules="v2", slots=1,
                   runner_version=__version__, spec_version=SPEC_VERSION, rules_version=RULES_VERSION, precision="fp32", devices_per_slot=1,
                   dataset=dataset)
        log.append("trial_proposed", trial="t0000", arch_hash=graph.hash(), parent=None, morphisms=[],
                   hparams=hparams, hparam_source="seed", round=0, epoch_budget=epochs)
        log.append("trial_started", trial="t0000", attempt=1, slot=0, nodes=["node0"], devices=1)
        best = 0.0
        for epoch in range(1, epochs + 1):
            started = clock()
            ended = started + 1.5
            accuracy = round(0.2 * epoch, 4)
            best = max(best, accuracy)
            fields = EpochEnd(trial="t0000", attempt=1, epoch=epoch, images_trained=4000, images_evaluated=2000,
                              val_accuracy=accuracy, val_loss=round(2.0 / epoch, 4), started_at=started,
                              ended_at=ended, seconds=ended - started).as_event()
            tlog.append("epoch_end", **fields)
            log.append("epoch_end", **fields)
        tlog.append("trial_result", trial="t0000", attempt=1, epochs=epochs, best_accuracy=best, reason="budget")
        log.append("trial_finished", trial="t0000", attempt=1, epochs=epochs, best_accuracy=best, reason="budget")
        log.append("run_finished", reason="duration")
    return root


def write_tar(path: Path, entries: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> Path:
    """A tar archive made member by member, as an attacker might (no checks at all)."""
    with tarfile.open(path, mode, format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def tar_entries(bundle: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    """The members of a (trusted, test-made) bundle with their contents."""
    out = []
    with tarfile.open(bundle) as tar:
        for info in tar.getmembers():
            fh = tar.extractfile(info)
            out.append((info, fh.read() if fh is not None else None))
    return out


def member(name: str, type: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = type
    info.linkname = linkname
    return info
