"""Synthetic, contract-conform run directories of any size (docs/internals.md, "Run directory").

`make_run(path, **params)` writes run.json, a hash-chained events.jsonl and trials/<id>/ files as
the controller would, streaming (memory stays flat for a million epochs). Used by the verification
tests, the service tests, bench/verify_throughput.py and the demo data's reports (devdata/reports.py).

Schedule (all times in float UTC seconds; every number is a parameter):

- `run_started` at `start`; each slot's first trial is proposed at `start + startup_s - 0.5` and
  started at `start + startup_s`.
- A trial on a slot: `trial_proposed` 0.5 s before `trial_started` (t = T). Epoch e runs from
  `T + sum of earlier epochs' seconds` for `epoch_seconds(i, e)`; the controller copies its
  `epoch_end` line `copy_delay_s` after ended_at; `trial_finished` follows `finish_delay_s` after the
  last epoch line. The slot's next trial starts `gap_s` after that.
- Trials are handed out to slots as slots free up, trial ids in proposal order, until `trials`
  trials have been run; `run_finished` (reason "exhausted") `end_delay_s` after the last event.
- A trial in `retry_trials` fails on its first attempt after ceil(epochs / 2) epochs
  (`trial_failed`, retry true) and is started again (attempt 2) on the same slot `gap_s` later,
  continuing from the next epoch (as a checkpoint resume does).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiperf_runner.spec import SPEC_VERSION
from aiperf_runner.spec import presetfacts as spec_presets
from aiperf_runner.spec.eventlog import GENESIS, encode
from aiperf_runner.spec.graph import Graph
from aiperf_runner.spec.proof import every_steps, stand_in_states
from aiperf_runner.spec.records import EpochEnd
from aiperf_runner.spec.rules import RULES_VERSION, thresholds

NumberFn = float | int | Callable[[int, int], float]

DEFAULT_DATASET = {"name": "smoke", "train_images": 4000, "val_images": 2000, "classes": 10, "image_size": 16}
IMAGENET_DATASET = {"name": "imagenet", "train_images": 1_281_167, "val_images": 50_000, "classes": 1000,
                    "image_size": 224}


def small_graph(k: int = 0, image_size: int = 16, classes: int = 10) -> Graph:
    """A small valid ResNet-ish graph; different `k` give different architectures (and hashes)."""
    g = Graph([(3, image_size, image_size)], [])
    width = 4 + (k % 8)
    depth = k // 8
    x = g.add_layer("conv2d", [0], in_channels=3, filters=width, kernel_size=3, stride=1, padding=1)
    x = g.add_layer("batchnorm2d", [x], num_features=width)
    x = g.add_layer("relu", [x])
    for _ in range(depth):
        y = g.add_layer("conv2d", [x], in_channels=width, filters=width, kernel_size=3, stride=1, padding=1)
        y = g.add_layer("batchnorm2d", [y], num_features=width)
        y = g.add_layer("add", [x, y])
        x = g.add_layer("relu", [y])
    x = g.add_layer("global_avgpool2d", [x])
    x = g.add_layer("dense", [x], in_units=width, units=classes)
    g.add_layer("softmax", [x])
    return g


class ChainWriter:
    """Writes hash-chained lines like spec.eventlog.EventWriter, without fsync (fast, for tests)."""

    def __init__(self, path: str | Path) -> None:
        self.fh = open(path, "wb", buffering=1 << 20)
        self.seq = 0
        self.prev = GENESIS

    def append(self, type: str, t: float, **fields: Any) -> dict[str, Any]:
        obj = {**fields, "seq": self.seq, "t": float(t), "type": type, "prev": self.prev}
        body = encode(obj)
        self.fh.write(body + b"\n")
        self.prev = hashlib.sha256(body).hexdigest()
        self.seq += 1
        return obj

    def close(self) -> None:
        self.fh.close()

    def __enter__(self) -> ChainWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_json(*, run_id: str, slots: int = 1, rules: str = "v2", preset: str = "smoke", precision: str = "fp32",
             declared_peak: float | dict[str, float] | None = 1.0e11, dataset: dict[str, Any] | None = None,
             start: float = 1_764_000_000.0, devices_per_slot: int = 1, accelerator_model: str = "cpu",
             accelerator_count: int = 0, cpu_model: str = "Synthetic CPU @ 2.00GHz", cpu_cores: int = 2,
             seed: int = 0, duration_s: float | None = None, max_trials: int | None = None) -> dict[str, Any]:
    """A run.json as docs/internals.md describes it."""
    dataset = dict(dataset or (IMAGENET_DATASET if preset == "imagenet" else DEFAULT_DATASET))
    if isinstance(declared_peak, dict):
        peaks = dict(declared_peak)
    elif declared_peak is None:
        peaks = {}
    else:
        peaks = {precision: float(declared_peak)}
    return {
        "run_id": run_id, "runner_version": "0.1.0", "spec_version": SPEC_VERSION, "rules_version": RULES_VERSION,
        "rules": rules, "preset": preset,
        "precision": precision, "seed": seed, "created_at": start,
        "config": {"slots": slots, "devices_per_slot": devices_per_slot,
                   "duration_s": duration_s if duration_s is not None else 0, "backend": "local",
                   "max_trials": max_trials},
        "system": {"nodes": slots if accelerator_count else 1, "cpu_model": cpu_model, "cpu_cores": cpu_cores,
                   "accelerators": [{"model": accelerator_model, "memory_bytes": 0}] * accelerator_count,
                   "accelerator_model": accelerator_model, "accelerator_count": accelerator_count,
                   "torch": "synthetic", "cuda": None},
        "declared_peak_flops": peaks,
        "dataset": dataset,
        "data_decoder": "tensor",
        "tuning": {"precision": precision, "data_decoder": "tensor", "data_workers": "auto", "channels_last": True,
                   "torch_compile": False, "cuda_graphs": False},
    }


DEFAULT_HPARAMS = {"batch_size": 32, "lr": 0.1, "weight_decay": 5e-4, "label_smoothing": 0.0, "dropout": 0.0}


def preset_hparams(preset: str) -> dict[str, Any]:
    """The preset's seed point (inside its search space, as integrity.bound requires)."""
    spec = spec_presets.get(preset)
    return dict(spec.space.defaults) if spec is not None else dict(DEFAULT_HPARAMS)


def run_started_fields(run: dict[str, Any]) -> dict[str, Any]:
    """What run_started states of the run (the fields integrity.bound compares with run.json)."""
    return {"run_id": run["run_id"], "preset": run["preset"], "rules": run["rules"],
            "slots": run["config"]["slots"], "runner_version": "0.1.0", "spec_version": run["spec_version"],
            "rules_version": run.get("rules_version"),
            "precision": run["precision"], "devices_per_slot": run["config"]["devices_per_slot"],
            "dataset": dict(run["dataset"])}


class RunBuilder:
    """A run directory written event by event with explicit times, for hand-computable tests.

    Times passed to `event`, `trial`, `epoch`, ... are seconds after `start` (run_started's time):

        b = RunBuilder(tmp, slots=1)        # run.json, and run_started at `start`
        b.trial("t0000", 1.0)               # graph.json + hparams.json + trial_proposed
        b.start_trial("t0000", 2.0, slot=0)
        b.epoch("t0000", 1, started_at=2.0, ended_at=12.0, trained=100, evaluated=10, accuracy=0.5)
        b.finish_trial("t0000", 13.0, epochs=1, best=0.5)
        b.close(finish_t=20.0)              # run_finished
    """

    def __init__(self, root: str | Path, *, start: float = 1_000_000.0, run_id: str = "ab" * 16,
                 **run_fields: Any) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "trials").mkdir(exist_ok=True)
        self.start = start
        self.run = run_json(run_id=run_id, start=start, **run_fields)
        (self.root / "run.json").write_text(json.dumps(self.run, indent=2, sort_keys=True) + "\n")
        self.log = ChainWriter(self.root / "events.jsonl")
        self.log.append("run_started", start, **run_started_fields(self.run))

    def event(self, type: str, t: float, **fields: Any) -> dict[str, Any]:
        return self.log.append(type, self.start + t, **fields)

    def trial(self, tid: str, t: float, graph: Graph | None = None, hparams: dict[str, Any] | None = None,
              epoch_budget: int = 3, arch_hash: str | None = None) -> Graph:
        ds = self.run["dataset"]
        graph = graph or small_graph(0, ds.get("image_size", 16), ds.get("classes", 10))
        hp = dict(preset_hparams(self.run["preset"]) if hparams is None else hparams)
        d = self.root / "trials" / tid
        d.mkdir(parents=True, exist_ok=True)
        (d / "graph.json").write_text(graph.dumps())
        (d / "hparams.json").write_text(json.dumps(hp, sort_keys=True))
        self.event("trial_proposed", t, trial=tid, arch_hash=arch_hash or graph.hash(), parent=None, morphisms=[],
                   hparams=hp, hparam_source="seed", round=0, epoch_budget=epoch_budget)
        return graph

    def start_trial(self, tid: str, t: float, slot: int = 0, attempt: int = 1, devices: int = 1) -> None:
        self.event("trial_started", t, trial=tid, attempt=attempt, slot=slot, nodes=[f"node{slot}"], devices=devices)

    def epoch(self, tid: str, epoch: int, *, started_at: float, ended_at: float, trained: int, evaluated: int,
              accuracy: float, attempt: int = 1, t: float | None = None, **extra: Any) -> None:
        """An epoch_end line written at `t` (default: ended_at); `extra`: its optional fields (`EpochEnd`'s)."""
        record = EpochEnd(trial=tid, attempt=attempt, epoch=epoch, images_trained=trained, images_evaluated=evaluated,
                          val_accuracy=accuracy, val_loss=round(1 - accuracy, 6), started_at=self.start + started_at,
                          ended_at=self.start + ended_at, seconds=ended_at - started_at, **extra)
        self.event("epoch_end", ended_at if t is None else t, **record.as_event())

    def finish_trial(self, tid: str, t: float, epochs: int, best: float, attempt: int = 1) -> None:
        self.event("trial_finished", t, trial=tid, attempt=attempt, epochs=epochs, best_accuracy=best,
                   reason="budget")

    def close(self, finish_t: float | None = None, reason: str = "duration") -> Path:
        if finish_t is not None:
            self.event("run_finished", finish_t, reason=reason)
        self.log.close()
        return self.root


def _fn(v: NumberFn) -> Callable[[int, int], float]:
    if callable(v):
        return v
    return lambda i, e: v


def default_accuracy(i: int, e: int) -> float:
    """Rises with the epoch, a little with the trial; stays below 0.99."""
    return round(min(0.99, 0.5 + 0.3 * (1 - 0.7 ** e) + 0.001 * (i % 50)), 6)


@dataclass
class FactoryRun:
    path: Path
    run_id: str
    start: float
    end: float = 0.0
    first_trial_start: float = 0.0
    trials: int = 0
    epochs: int = 0
    events: int = 0
    arch_hashes: list[str] = field(default_factory=list)


def make_run(path: str | Path, *, slots: int = 2, trials: int = 4, epochs: int | Callable[[int], int] = 3,
             epoch_seconds: NumberFn = 10.0, accuracy: NumberFn = default_accuracy,
             images_trained: NumberFn | None = None, images_evaluated: NumberFn | None = None,
             precision: str = "fp32", declared_peak: float | dict[str, float] | None = 1.0e11,
             preset: str = "smoke", rules: str = "v2", dataset: dict[str, Any] | None = None,
             start: float = 1_764_000_000.0, startup_s: float = 2.0, gap_s: float = 1.0,
             copy_delay_s: float = 0.25, finish_delay_s: float = 0.25, end_delay_s: float = 1.0,
             archs: int = 4, graph_fn: Callable[[int], Graph] | None = None, kernel_size: int | None = None,
             devices_per_slot: int = 1, accelerator_model: str = "cpu", accelerator_count: int = 0,
             cpu_model: str = "Synthetic CPU @ 2.00GHz", cpu_cores: int = 2,
             retry_trials: frozenset[int] | set[int] = frozenset(), finish: bool = True,
             trial_logs: bool = True, run_id: str | None = None, seed: int = 0,
             duration_s: float | None = None, witness: TestWitness | None = None,
             system_id: int | None = None, commitments: bool = True) -> FactoryRun:
    """Write a synthetic run directory at `path` (created); see the module docstring for the schedule.

    `epochs(i)`, `epoch_seconds(i, e)`, `accuracy(i, e)`, `images_trained(i, e)`,
    `images_evaluated(i, e)` may be numbers or functions of the trial index i (0-based, proposal
    order) and epoch e (1-based). Trial i uses architecture `graph_fn(i % archs)` (default
    `small_graph`). `declared_peak` is the system's peak FLOP/s at `precision` (or a dict per
    precision). `trial_logs=False` skips the per-trial event logs and stdout/stderr files.
    `witness` (a `TestWitness`): the run carries a run token and a heartbeat with its receipt every
    `witness.interval` seconds, the last after run_finished, as a witnessed run's log does.
    `system_id`: the registered system run.json names (as `run --system` records it).
    `commitments`: every epoch's `epoch_states` line before its epoch_end (stand-in digests, chained).
    """
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    (root / "trials").mkdir(exist_ok=True)
    dataset = dict(dataset or (IMAGENET_DATASET if preset == "imagenet" else DEFAULT_DATASET))
    run_id = run_id or hashlib.sha256(f"{root.resolve()}|{seed}".encode()).hexdigest()[:32]
    epochs_fn = epochs if callable(epochs) else (lambda i, _n=epochs: _n)
    sec_fn, acc_fn = _fn(epoch_seconds), _fn(accuracy)
    tr_fn = _fn(images_trained if images_trained is not None else dataset["train_images"])
    ev_fn = _fn(images_evaluated if images_evaluated is not None else dataset["val_images"])
    every = every_steps(thresholds(), preset) or 50

    graph_fn = graph_fn or (lambda k: small_graph(k, dataset.get("image_size", 16), dataset.get("classes", 10)))
    arch_json: list[bytes] = []
    arch_hash: list[str] = []
    for k in range(max(1, archs)):
        g = graph_fn(k)
        arch_json.append(json.dumps(g.to_json(), separators=(",", ":")).encode())
        arch_hash.append(g.hash())

    run = run_json(run_id=run_id, slots=slots, rules=rules, preset=preset, precision=precision,
                   declared_peak=declared_peak, dataset=dataset, start=start, devices_per_slot=devices_per_slot,
                   accelerator_model=accelerator_model, accelerator_count=accelerator_count, cpu_model=cpu_model,
                   cpu_cores=cpu_cores, seed=seed, duration_s=duration_s, max_trials=trials)
    if witness is not None:
        run["system"]["id"] = witness.system
    if system_id is not None:
        run["system"]["id"] = system_id
    (root / "run.json").write_text(json.dumps(run, indent=2, sort_keys=True) + "\n")

    out = FactoryRun(root, run_id, start, arch_hashes=arch_hash)
    counter = [0]

    def next_trial() -> int | None:
        if counter[0] >= trials:
            return None
        counter[0] += 1
        return counter[0] - 1

    def write_trial_files(i: int, tid: str) -> tuple[Path, dict[str, Any]]:
        d = root / "trials" / tid
        d.mkdir(exist_ok=True)
        (d / "graph.json").write_bytes(arch_json[i % len(arch_json)])
        hp = preset_hparams(preset)
        if kernel_size is not None:
            hp["kernel_size"] = kernel_size
        (d / "hparams.json").write_text(json.dumps(hp, sort_keys=True))
        n = epochs_fn(i)
        (d / "trial.json").write_text(json.dumps({
            "trial": tid, "epoch_budget": n, "precision": precision, "preset": preset, "data": None,
            "dataset": dataset, "seed": i, "device_type": "cpu", "early_stopping_patience": 2,
            "num_classes": dataset.get("classes", 10), "image_size": dataset.get("image_size", 16)}, sort_keys=True))
        return d, hp

    def slot_events(slot: int, t: float) -> Iterator[tuple[float, str, dict[str, Any], Any]]:
        """(t, type, fields, trial log) of one slot's events in time order."""
        while True:
            i = next_trial()
            if i is None:
                return
            tid = f"t{i:04d}"
            d, hp = write_trial_files(i, tid)
            n = epochs_fn(i)
            yield (t - 0.5, "trial_proposed", {
                "trial": tid, "arch_hash": arch_hash[i % len(arch_hash)], "parent": None if i == 0 else "t0000",
                "morphisms": [] if i == 0 else ["deeper"], "hparams": hp,
                "hparam_source": "seed" if i == 0 else "tpe", "round": i // slots, "epoch_budget": n}, None)
            tlog = ChainWriter(d / "events.jsonl") if trial_logs else None
            attempts = [(1, 1, n)]
            if i in retry_trials and n >= 2:
                half = math.ceil(n / 2)
                attempts = [(1, 1, half), (2, half + 1, n)]
            best = 0.0
            for attempt, first, last in attempts:
                yield (t, "trial_started", {"trial": tid, "attempt": attempt, "slot": slot,
                                            "nodes": [f"node{slot:03d}"], "devices": devices_per_slot}, None)
                clock = t + 0.05
                line_t = t
                for e in range(first, last + 1):
                    secs = float(sec_fn(i, e))
                    a = float(acc_fn(i, e))
                    best = max(best, a)
                    fields = EpochEnd(trial=tid, attempt=attempt, epoch=e, images_trained=int(tr_fn(i, e)),
                                      images_evaluated=int(ev_fn(i, e)), val_accuracy=a,
                                      val_loss=round(2.5 * (1 - a), 6), started_at=clock, ended_at=clock + secs,
                                      seconds=secs).as_event()
                    clock += secs
                    line_t = clock + copy_delay_s
                    if commitments:
                        states = stand_in_states(tid, attempt, e, int(fields["images_trained"]), every)
                        if tlog is not None:
                            tlog.append("epoch_states", clock, **states)
                        yield (line_t, "epoch_states", states, None)
                    if tlog is not None:
                        tlog.append("epoch_end", clock, **fields)
                    yield (line_t, "epoch_end", fields, None)
                t_end = line_t + finish_delay_s
                if attempt == 1 and len(attempts) == 2:
                    yield (t_end, "trial_failed", {"trial": tid, "attempt": 1, "error": "node lost",
                                                   "retry": True}, None)
                    t = t_end + gap_s
                    continue
                if tlog is not None:
                    tlog.append("trial_result", clock, trial=tid, attempt=attempt, epochs=n, best_accuracy=best,
                                reason="budget")
                    tlog.close()
                    (d / "stdout.log").write_text(f"trial {tid} done\n")
                    (d / "stderr.log").write_text("")
                yield (t_end, "trial_finished", {"trial": tid, "attempt": attempt, "epochs": n,
                                                 "best_accuracy": best, "reason": "budget"}, None)
                t = t_end + gap_s

    with ChainWriter(root / "events.jsonl") as log:
        started = run_started_fields(run)
        if witness is not None:
            started["token"] = witness.token(run, issued_at=start - 3.0)
        log.append("run_started", start, **started)
        beats = witness.beats(log, run_id, start) if witness is not None else None
        heap: list[tuple[float, int, int, str, dict[str, Any], Iterator[Any]]] = []
        order = 0
        first = start + startup_s
        out.first_trial_start = math.inf
        for s in range(slots):
            gen = slot_events(s, first)
            item = next(gen, None)
            if item is not None:
                heapq.heappush(heap, (item[0], order, s, item[1], item[2], gen))
                order += 1
        last_t = start
        while heap:
            t, _, s, kind, fields, gen = heapq.heappop(heap)
            t = max(t, last_t)
            if beats is not None:
                t = max(t, beats.until(t, out.epochs))
            log.append(kind, t, **fields)
            last_t = t
            if kind == "epoch_end":
                out.epochs += 1
            elif kind == "trial_started":
                out.first_trial_start = min(out.first_trial_start, t)
            elif kind == "trial_proposed":
                out.trials += 1
            item = next(gen, None)
            if item is not None:
                heapq.heappush(heap, (item[0], order, s, item[1], item[2], gen))
                order += 1
        out.end = last_t
        if finish:
            out.end = last_t + end_delay_s
            log.append("run_finished", out.end, reason="exhausted")
        if beats is not None:
            beats.beat(out.end + 0.5, out.epochs)  # the final heartbeat, after run_finished
        out.events = log.seq
    if out.first_trial_start == math.inf:
        out.first_trial_start = 0.0
    return out


class TestWitness:
    """Plays the service's part in a factory run: signs a run token and a receipt for every heartbeat
    with its own Ed25519 key (`keys` is what verify() takes as `witness_keys`)."""

    __test__ = False  # not a pytest class

    def __init__(self, interval: float = 60.0, site: int = 1, system: int = 1, seed: int = 0) -> None:
        from aiperf_runner.spec import keys as spec_keys
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        self.key = Ed25519PrivateKey.generate()
        self.public = spec_keys.public_bytes(self.key.public_key())
        self.fingerprint = spec_keys.fingerprint(self.public)
        self.interval, self.site, self.system = interval, site, system
        self._beacons = random.Random(seed)
        self._chain: dict[str, str] = {}  # run id -> digest of its last receipt

    @property
    def keys(self) -> dict[str, bytes]:
        return {self.fingerprint: self.public}

    def token(self, run: dict[str, Any], issued_at: float) -> dict[str, Any]:
        from aiperf_runner.spec import witness

        cfg = run["config"]
        self._chain.pop(run["run_id"], None)  # a new token: its receipts start a chain of their own
        statement = {"kind": witness.TOKEN_KIND, "run_id": run["run_id"], "site": self.site, "system": self.system,
                     "preset": run["preset"], "rules": run["rules"], "precision": run["precision"],
                     "slots": cfg["slots"], "devices_per_slot": cfg["devices_per_slot"],
                     "duration_s": cfg["duration_s"], "runner_version": run["runner_version"],
                     "issued_at": issued_at, "nonce": "00" * 16, "heartbeat_interval_s": self.interval,
                     "key": self.fingerprint}
        return {"statement": statement, "signature": witness.sign(self.key, statement)}

    def receipt(self, run_id: str, seq: int, head: str, received_at: float) -> dict[str, Any] | None:
        from aiperf_runner.spec import witness

        statement = {"kind": witness.RECEIPT_KIND, "run_id": run_id, "heartbeat_seq": seq, "head": head,
                     "received_at": received_at, "beacon": f"{self._beacons.getrandbits(256):064x}",
                     "key": self.fingerprint, witness.RECEIPT_CHAIN: self._chain.get(run_id)}
        self._chain[run_id] = witness.receipt_digest(statement)  # as the service chains a token's receipts
        fields = {k: v for k, v in statement.items() if k != "kind"}
        return {**fields, "signature": witness.sign(self.key, statement)}

    def beats(self, log: ChainWriter, run_id: str, start: float) -> _Beats:
        return _Beats(self, log, run_id, start + 0.5)


class _Beats:
    """Writes a heartbeat and its receipt into a factory log whenever the clock passes the next beat."""

    def __init__(self, witness: TestWitness, log: ChainWriter, run_id: str, first: float) -> None:
        self.witness, self.log, self.run_id, self.next = witness, log, run_id, first

    def beat(self, t: float, epochs: int) -> float:
        hb = self.log.append("heartbeat", t, work=0.0, epochs=epochs, best_accuracy=None)
        receipt = self.witness.receipt(self.run_id, hb["seq"], self.log.prev, t + 0.01)
        if receipt is None:  # the service did not answer
            return t
        self.log.append("witness", t + 0.02, **receipt)
        return t + 0.02

    def until(self, t: float, epochs: int) -> float:
        """Beat for every interval that ended by `t`; the time of the last line written (or 0)."""
        last = 0.0
        while self.next <= t:
            last = self.beat(self.next, epochs)
            self.next += self.witness.interval
        return last


def registration_of(path: str | Path, **over: Any) -> dict[str, Any]:
    """An approved registration of the hardware a run directory's run.json describes (as the service
    would hold it), with `over` changed."""
    system = json.loads((Path(path) / "run.json").read_text())["system"]
    count = int(system.get("accelerator_count") or 0)
    nodes = max(int(system.get("nodes") or 1), 1)
    reg = {"id": 1, "name": "test system", "accelerator_model": system.get("accelerator_model") or "cpu",
           "accelerators_per_node": -(-count // nodes) if count else 0, "nodes": nodes if count else 1,
           "cpu_model": system.get("cpu_model") or "", "cpu_cores": int(system.get("cpu_cores") or 0),
           "status": "approved"}
    reg.update(over)
    return reg


def rewrite_events(path: str | Path, edit: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
    """Re-chain a (small) run's events.jsonl after `edit` changed the list of event dicts.

    For tests that need a log which is *validly chained* but says something wrong.
    """
    p = Path(path) / "events.jsonl"
    events = [json.loads(line) for line in p.read_bytes().splitlines()]
    events = edit(events)
    tmp = p.with_suffix(".tmp")
    with ChainWriter(tmp) as w:
        for ev in events:
            fields = {k: v for k, v in ev.items() if k not in ("seq", "t", "type", "prev")}
            w.append(ev["type"], ev["t"], **fields)
    os.replace(tmp, p)
