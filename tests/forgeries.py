"""Forged logs, each made from an honest official run with the project's own run factory, as a site
holding its own signing key could make them (the caller re-signs them with the site's key).

`HONEST` builds the honest run; every `Forgery` edits a copy of it and names the check that must
catch it and how the result ends: `rejected`, or `open` (verified, outside the official ranking).
Used by the spec-level tests (tests/verify/test_forgeries.py) and the service's forgery matrix on
PostgreSQL and Celery (tests/service/test_e2e_forgeries.py).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiperf_runner.spec.graph import Graph

from devdata.runfactory import IMAGENET_DATASET, TestWitness, make_run, registration_of, rewrite_events, small_graph

H100 = "NVIDIA H100 80GB HBM3"
H100_BF16 = 989.4e12


HONEST = dict(preset="imagenet", slots=8, trials=32, epochs=4, epoch_seconds=250.0, precision="bf16",
              accelerator_model=H100, accelerator_count=8, devices_per_slot=1, declared_peak=8 * H100_BF16)


def honest(path: Path, witness: TestWitness | None = None) -> Path:
    """An official imagenet run of ~67 minutes: 8 slots of one H100 each, on one node of 8; witnessed
    by `witness` (a test's stand-in for the service) when given."""
    make_run(path, run_id="0f" * 16, witness=witness, **HONEST)  # type: ignore[arg-type]
    return path


def honest_registration(path: Path, **over: Any) -> dict[str, Any]:
    """The honest site's registration: its 8 H100s on the nodes its run found (one per slot)."""
    return registration_of(path, **{"name": "Honest H100 nodes", **over})


def _events(path: Path, fn: Callable[[list[dict[str, Any]]], list[dict[str, Any]] | None]) -> None:
    def edit(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = fn(events)
        return events if out is None else out
    rewrite_events(path, edit)


def _run_json(path: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads((path / "run.json").read_text())
    fn(data)
    (path / "run.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _each(events: list[dict[str, Any]], kind: str, fn: Callable[[dict[str, Any]], None]) -> None:
    for e in events:
        if e["type"] == kind:
            fn(e)


# ---- the forgeries --------------------------------------------------------------------------------
def eighty_accelerators(path: Path) -> None:
    """Claim 10 accelerators per trial on the 8 slots (80 in all) and epochs 10x faster."""
    def edit(events: list[dict[str, Any]]) -> None:
        _each(events, "run_started", lambda e: e.update(devices_per_slot=10))
        _each(events, "trial_started", lambda e: e.update(devices=10))
        _each(events, "epoch_end", lambda e: e.update(started_at=e["ended_at"] - e["seconds"] / 10,
                                                      seconds=e["seconds"] / 10))
    _events(path, edit)

    def run(d: dict[str, Any]) -> None:
        d["config"]["devices_per_slot"] = 10
        d["system"]["accelerator_count"] = 80
        d["system"]["accelerators"] = d["system"]["accelerators"] * 10
        d["declared_peak_flops"] = {"bf16": 80 * H100_BF16}
    _run_json(path, run)


def unknown_model_huge_peak(path: Path) -> None:
    """An accelerator the peak table lacks, declared at 1e18 FLOP/s."""
    def run(d: dict[str, Any]) -> None:
        d["system"]["accelerator_model"] = "Acme Tensor 9000"
        d["system"]["accelerators"] = [{"model": "Acme Tensor 9000", "memory_bytes": 0}] * 8
        d["declared_peak_flops"] = {"bf16": 1e18}
    _run_json(path, run)


def rules_switched(path: Path) -> None:
    """run.json's rules switched to v1-compat after the run (run_started still says v2)."""
    _run_json(path, lambda d: d.update(rules="v1-compat"))


def input_448_ten_classes(path: Path) -> None:
    """imagenet with graphs of 448x448 inputs and 10 classes (4x the FLOPs per image)."""
    big = small_graph(0, image_size=448, classes=10)
    for trial in (path / "trials").iterdir():
        (trial / "graph.json").write_text(big.dumps())
    _run_json(path, lambda d: d["dataset"].update(classes=10, image_size=448))
    _events(path, lambda events: _each(events, "trial_proposed", lambda e: e.update(arch_hash=big.hash())))
    _events(path, lambda events: _each(events, "run_started", lambda e: e["dataset"].update(classes=10,
                                                                                           image_size=448)))


def past_the_search_bounds(path: Path) -> None:
    """One trial's graph swapped for a network the search never proposes: two 512-filter 3x3 convolutions at
    full resolution, about 60 times ResNet-50's FLOPs per image (the imagenet search stops at 4 times)."""
    g = Graph([(3, 224, 224)], [])
    x = g.add_layer("conv2d", [0], in_channels=3, filters=512, kernel_size=3, stride=1, padding=1)
    for _ in range(2):
        x = g.add_layer("relu", [g.add_layer("batchnorm2d", [x], num_features=512)])
        x = g.add_layer("conv2d", [x], in_channels=512, filters=512, kernel_size=3, stride=1, padding=1)
    x = g.add_layer("global_avgpool2d", [x])
    g.add_layer("dense", [x], in_units=512, units=1000)
    names = sorted(t.name for t in (path / "trials").iterdir())
    trial = names[len(names) // 2]
    (path / "trials" / trial / "graph.json").write_text(g.dumps())
    _events(path, lambda events: _each(events, "trial_proposed", lambda e: e.update(arch_hash=g.hash())
                                         if e["trial"] == trial else None))


def kernel_size_edited(path: Path) -> None:
    """hparams.json's kernel_size edited (what v1-compat's quirk charges)."""
    for trial in (path / "trials").iterdir():
        hp = json.loads((trial / "hparams.json").read_text())
        hp["kernel_size"] = 64
        (trial / "hparams.json").write_text(json.dumps(hp, sort_keys=True))


def new_run_id_second_system(path: Path) -> None:
    """The same run resubmitted with a new run id under a second system name (caught by the service)."""
    new_id = "1e" * 16
    _run_json(path, lambda d: (d.update(run_id=new_id), d["system"].update(name="Second name")))
    _events(path, lambda events: _each(events, "run_started", lambda e: e.update(run_id=new_id)))


def unstable(path: Path, witness: TestWitness | None = None) -> None:
    """The same machine, but the last trial of every slot is one epoch that runs for as long as the rest
    of the run: no work completes for half the run, then all of it at the end. Written afresh (and
    witnessed by the same witness: an honest log of an unstable run)."""
    shutil.rmtree(path)
    make_run(path, **{**HONEST, "epochs": lambda i: 4 if i < 24 else 1,  # type: ignore[arg-type]
                      "epoch_seconds": lambda i, e: 250.0 if i < 24 else 3000.0}, run_id="0e" * 16, witness=witness)


def overlapping_epochs(path: Path) -> None:
    """Every epoch after a trial's first claims to have started when the epoch before it did, overlapping it:
    each epoch's FLOP rate looks about half of what the slot did (what a run that trained twice the work its
    slots could would need), and none starts before its attempt."""
    def edit(events: list[dict[str, Any]]) -> None:
        began: dict[tuple[str, int], float] = {}
        for e in events:
            if e["type"] == "epoch_end":
                key, own = (e["trial"], e["attempt"]), e["started_at"]
                if key in began:
                    e.update(started_at=began[key], seconds=e["ended_at"] - began[key])
                began[key] = own
    _events(path, edit)


def trial_more_devices_than_its_slot(path: Path) -> None:
    _events(path, lambda events: [e for e in events if e["type"] == "trial_started"][3].update(devices=2))


def concurrency_past_registration(path: Path) -> None:
    """Nothing edited: the log is honest, the registration has 4 accelerators (see `registration`)."""


@dataclass(frozen=True)
class Forgery:
    name: str
    forge: Callable[[Path], None]
    check: str  # the check that must catch it
    outcome: str  # "rejected" or "open"
    registration: dict[str, Any] = field(default_factory=dict)  # changes to the honest registration
    service_only: bool = False  # caught by the service's records, not by the log alone
    fresh: bool = False  # `forge(path, witness)` writes a new witnessed log rather than editing one


FORGERIES = (
    # Registered as H100s (the honest run's own registration; on the service, one of the forger's H100 systems).
    Forgery("80-accelerators-on-8", eighty_accelerators, "system.devices", "rejected", {"accelerator_model": H100}),
    Forgery("unknown-model-huge-peak", unknown_model_huge_peak, "system.peak", "open",
            {"accelerator_model": "Acme Tensor 9000", "status": "pending"}),
    Forgery("rules-switched-after-the-run", rules_switched, "integrity.bound", "rejected"),
    Forgery("imagenet-448px-10-classes", input_448_ten_classes, "integrity.bound", "rejected"),
    Forgery("kernel-size-edited", kernel_size_edited, "integrity.bound", "rejected"),
    Forgery("a-graph-past-the-search-bounds", past_the_search_bounds, "integrity.bound", "rejected"),
    Forgery("resubmitted-new-run-id", new_run_id_second_system, "integrity.duplicate", "rejected",
            service_only=True),
    Forgery("unstable", unstable, "stability.score_cv", "open", fresh=True),
    Forgery("epochs-overlap-in-an-attempt", overlapping_epochs, "plausibility.timestamps", "rejected"),
    Forgery("trial-claims-more-devices-than-its-slot", trial_more_devices_than_its_slot, "system.devices",
            "rejected"),
    Forgery("concurrent-trials-past-the-registration", concurrency_past_registration, "system.devices", "rejected",
            {"nodes": 1, "accelerators_per_node": 4}),
)


def forged_copy(honest_path: Path, forgery: Forgery, dest: Path, witness: TestWitness | None = None) -> Path:
    shutil.copytree(honest_path, dest)
    for name in ("MANIFEST.json", "MANIFEST.sig"):
        (dest / name).unlink(missing_ok=True)
    if forgery.fresh:
        forgery.forge(dest, witness)  # type: ignore[call-arg]
    else:
        forgery.forge(dest)
    return dest


__all__ = ["FORGERIES", "Forgery", "Graph", "forged_copy", "honest", "honest_registration", "IMAGENET_DATASET"]
