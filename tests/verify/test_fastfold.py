"""The chunked fold (spec/epochscan.py, epochplan.py, fastfold.py) gives `verify()` the report of the
line-by-line fold (`verify.FAST_FOLD = False`), byte for byte, on varied generated runs and on logs
damaged every way the checks care about: tampered, cut short, reordered, a bad line in the middle of
a chunk, and — with chunks of a few lines — a chunk boundary inside every trial's epochs.

Each case is verified line by line once, then chunked in this process at two chunk sizes; a few
cases with two worker processes too; then 40 logs with random values in random fields of random
epoch lines. About 30 s.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.spec import fastfold, logchunks, runio
from aiperf_runner.spec import verify as verify_module
from aiperf_runner.spec.eventlog import GENESIS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devdata.runfactory import TestWitness, make_run

WITNESS = TestWitness(interval=20.0, seed=3)
PREV = re.compile(rb'"prev":"[0-9a-f]{64}"')
SEQ = re.compile(rb'"seq":[0-9]+')
Edit = Callable[[list[bytes]], list[bytes]]


def rechain(lines: list[bytes]) -> list[bytes]:
    """Sequence numbers and `prev` set right again (a forger's rewrite after an edit)."""
    out, prev = [], GENESIS
    for i, line in enumerate(lines):
        line = PREV.sub(b'"prev":"' + prev.encode() + b'"', SEQ.sub(b'"seq":%d' % i, line, count=1), count=1)
        out.append(line)
        prev = hashlib.sha256(line).hexdigest()
    return out


def epochs_at(lines: list[bytes]) -> list[int]:
    return [i for i, line in enumerate(lines) if b'"type":"epoch_end"' in line]


def nth_epoch(k: int) -> Callable[[list[bytes]], int]:
    return lambda lines: epochs_at(lines)[min(k, len(epochs_at(lines)) - 1)]


def edit_json(k: int, fn: Callable[[dict[str, Any]], None]) -> Edit:
    """Change the k-th epoch line's fields."""
    def edit(lines: list[bytes]) -> list[bytes]:
        i = nth_epoch(k)(lines)
        d = json.loads(lines[i])
        fn(d)
        lines[i] = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
        return lines
    return edit


def insert(k: int, make: Callable[[dict[str, Any]], dict[str, Any]]) -> Edit:
    """A line made from the k-th epoch line, put before it."""
    def edit(lines: list[bytes]) -> list[bytes]:
        i = nth_epoch(k)(lines)
        d = json.loads(lines[i])
        new = {"prev": GENESIS, "seq": 0, "t": d["t"], **make(d)}  # rechained below
        return lines[:i] + [json.dumps(new, sort_keys=True, separators=(",", ":")).encode()] + lines[i:]
    return edit


def replace_in(k: int, old: bytes, new: bytes) -> Edit:
    def edit(lines: list[bytes]) -> list[bytes]:
        i = nth_epoch(k)(lines)
        lines[i] = lines[i].replace(old, new, 1)
        return lines
    return edit


def every_epoch(step: int, fn: Callable[[bytes], bytes]) -> Edit:
    return lambda lines: [fn(x) if i % step == 0 and b'"type":"epoch_end"' in x else x for i, x in enumerate(lines)]


def first_epochs_with_accelerators(lines: list[bytes]) -> list[bytes]:
    """As a real runner logs them: `accelerators` and `lr_scaling` in each attempt's first epoch."""
    seen, out = set(), []
    for line in lines:
        if b'"type":"epoch_end"' in line:
            d = json.loads(line)
            if (d["trial"], d["attempt"]) not in seen:
                seen.add((d["trial"], d["attempt"]))
                d["accelerators"] = {"cpu": 1}
                d["lr_scaling"] = {"rule": "linear", "base_lr": 0.1, "reference_batch": 32, "global_batch": 32,
                                   "peak_lr": 0.1, "warmup_epochs": 1}
                line = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
        out.append(line)
    return out


def early_epoch(lines: list[bytes], k: int) -> int:
    """The first line from the k-th epoch on that is a trial's second epoch (its end is far off, so no
    other line near it names the trial)."""
    return next(i for i in epochs_at(lines)[k:] if json.loads(lines[i])["epoch"] == 2)


def clash_on_slot_of(lines: list[bytes], k: int) -> list[bytes]:
    """A trial no other line names started on the slot of an early epoch's trial, just before it:
    that trial's later epochs belong to an attempt the replay dropped."""
    i = early_epoch(lines, k)
    d = json.loads(lines[i])
    started = next(json.loads(x) for x in lines if b'"type":"trial_started"' in x
                   and json.loads(x)["trial"] == d["trial"] and json.loads(x)["attempt"] == d["attempt"])
    new = {"prev": GENESIS, "seq": 0, "t": d["t"], "type": "trial_started", "trial": "t0999", "attempt": 1,
           "slot": started["slot"], "nodes": [], "devices": 1}
    return lines[:i] + [json.dumps(new, sort_keys=True, separators=(",", ":")).encode()] + lines[i:]


def repeat_after(lines: list[bytes], k: int) -> list[bytes]:
    """A trial's first epoch logged again (with a field more) just after its third, from the k-th
    epoch on: a repeat that reads what the epochs before it in the same chunk left."""
    i = next(i for i in epochs_at(lines)[k:] if json.loads(lines[i])["epoch"] == 3)
    trial = json.loads(lines[i])["trial"]
    first = next(x for x in lines if b'"type":"epoch_end"' in x and json.loads(x)["trial"] == trial
                 and json.loads(x)["epoch"] == 1)
    d = {**json.loads(first), "x": 1, "t": json.loads(lines[i])["t"]}
    return lines[:i + 1] + [json.dumps(d, sort_keys=True, separators=(",", ":")).encode()] + lines[i + 1:]


# name -> (edit, rechain afterwards)
DAMAGE: dict[str, tuple[Edit, bool]] = {
    "intact": (lambda lines: lines, False),
    "accelerators": (first_epochs_with_accelerators, True),
    "byte-changed": (replace_in(40, b'"images_trained":4000', b'"images_trained":4001'), False),
    "line-removed": (lambda lines: lines[:nth_epoch(40)(lines)] + lines[nth_epoch(40)(lines) + 1:], False),
    "lines-swapped": (lambda lines: (lambda i: lines[:i] + [lines[i + 1], lines[i]] + lines[i + 2:])(
        nth_epoch(40)(lines)), False),
    "swapped-rechained": (lambda lines: (lambda i: lines[:i] + [lines[i + 1], lines[i]] + lines[i + 2:])(
        nth_epoch(40)(lines)), True),
    "truncated": (lambda lines: lines[:-1] + [lines[-1][:-9]], False),
    "cut-mid-line": (lambda lines: lines[:nth_epoch(50)(lines)] + [lines[nth_epoch(50)(lines)][:40]], False),
    "garbage-mid-chunk": (lambda lines: lines[:nth_epoch(45)(lines)] + [b'{"seq":'] + lines[nth_epoch(45)(lines):],
                          True),
    "time-back": (edit_json(40, lambda d: d.update(t=d["t"] - 100.0)), True),
    "times-back": (every_epoch(9, lambda x: re.sub(rb'"t":([0-9.]+)', lambda m: b'"t":%r' % (
        float(m.group(1)) - 50.0), x, count=1)), True),
    "epoch-repeated": (edit_json(40, lambda d: d.update(epoch=1)), True),
    "epoch-gap": (edit_json(40, lambda d: d.update(epoch=d["epoch"] + 2)), True),
    "attempt-unknown": (edit_json(40, lambda d: d.update(attempt=7)), True),
    "trial-unknown": (edit_json(40, lambda d: d.update(trial="t9999")), True),
    "ended-before-started": (edit_json(40, lambda d: d.update(ended_at=d["started_at"] - 1.0)), True),
    "started-early": (edit_json(40, lambda d: d.update(started_at=d["started_at"] - 1e5)), True),
    "ended-back": (edit_json(40, lambda d: d.update(ended_at=d["ended_at"] - 9.0, started_at=d["started_at"] - 9.0)),
                   True),
    "evaluated-wrong": (edit_json(40, lambda d: d.update(images_evaluated=5)), True),
    "trained-too-many": (edit_json(40, lambda d: d.update(images_trained=4000 + 40 + 1024 + 1)), True),  # cap + 1
    "ended-after-its-line": (edit_json(40, lambda d: d.update(ended_at=d["t"] + 1000.0)), True),
    "too-fast": (edit_json(40, lambda d: d.update(started_at=d["ended_at"] - 1e-9)), True),
    "zero-accuracy": (every_epoch(5, lambda x: re.sub(rb'"val_accuracy":[0-9.e-]+', b'"val_accuracy":0.0', x)), True),
    "int-fields": (every_epoch(7, lambda x: re.sub(rb'"(t|val_accuracy|seconds)":([0-9]+)\.[0-9]+', rb'"\1":\2', x)),
                   True),
    "extra-field": (replace_in(40, b'"type":"epoch_end"', b'"type":"epoch_end","x":1'), True),
    "duplicate-key": (replace_in(40, b'"epoch":', b'"epoch":99,"epoch":'), True),
    "loss-null": (every_epoch(6, lambda x: re.sub(rb'"val_loss":[0-9.e-]+', b'"val_loss":null', x)), True),
    "heartbeat-before-epoch": (insert(40, lambda d: {"type": "heartbeat", "work": 1.0, "epochs": 1,
                                                     "best_accuracy": None}), True),
    "slot-lost": (insert(40, lambda d: {"type": "slot_lost", "slot": 1, "reason": "gone"}), True),
    "resumed": (insert(40, lambda d: {"type": "run_resumed", "run_id": "ab" * 16}), True),
    "proposed-again": (insert(40, lambda d: {"type": "trial_proposed", "trial": d["trial"], "arch_hash": "0" * 64,
                                             "parent": None, "morphisms": [], "hparams": {}, "hparam_source": "seed",
                                             "round": 0, "epoch_budget": 3}), True),
    "started-again": (insert(40, lambda d: {"type": "trial_started", "trial": d["trial"], "attempt": d["attempt"],
                                            "slot": 0, "nodes": [], "devices": 1}), True),
    "clash-on-slot": (insert(40, lambda d: {"type": "trial_started", "trial": "t0001", "attempt": 5, "slot": 0,
                                            "nodes": [], "devices": 1}), True),
    "clash-on-a-quiet-slot": (lambda lines: clash_on_slot_of(lines, 40), True),
    "repeat-after-epochs": (lambda lines: repeat_after(lines, 40), True),
    "bad-start": (insert(40, lambda d: {"type": "trial_started", "trial": d["trial"], "attempt": 9, "slot": "x",
                                        "nodes": [], "devices": 1}), True),
    "finished-early": (insert(40, lambda d: {"type": "trial_finished", "trial": d["trial"], "attempt": d["attempt"],
                                             "epochs": 1, "best_accuracy": 0.5, "reason": "budget"}), True),
}


def damaged(base: Path, dest: Path, name: str) -> Path:
    shutil.copytree(base, dest)
    edit, again = DAMAGE[name]
    log = dest / "events.jsonl"
    lines = edit(log.read_bytes().split(b"\n")[:-1])
    if again:
        lines = rechain(lines)
    cut = name in ("truncated", "cut-mid-line")
    log.write_bytes(b"\n".join(lines) + (b"" if cut else b"\n"))
    return dest


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fastfold")
    return {
        # retries, a witness every 20 s, epochs of varied length: trials overlap at chunk edges
        "witnessed": make_run(root / "witnessed", slots=4, trials=24, epochs=lambda i: 3 + i % 6,
                              retry_trials={3, 10, 17}, witness=WITNESS,
                              epoch_seconds=lambda i, e: 2.0 + 0.37 * ((i * 7 + e) % 5)).path,
        "v1-unfinished": make_run(root / "v1", slots=3, trials=12, epochs=5, rules="v1-compat", finish=False,
                                  archs=3, retry_trials={4}).path,
        # slots in step: epochs of several trials end at the same instant (the table's order shows)
        "in-step": make_run(root / "in-step", slots=6, trials=24, epochs=6, epoch_seconds=10.0, archs=5).path,
        # two devices per slot (an attempt the replay dropped is charged one: its rate to peak shows)
        "two-devices": make_run(root / "two-devices", slots=3, trials=12, epochs=8, epoch_seconds=30.0,
                                preset="imagenet", precision="bf16", accelerator_model="NVIDIA H100 80GB HBM3",
                                accelerator_count=6, devices_per_slot=2, declared_peak=6 * 989.4e12).path,
        "imagenet-peak": make_run(root / "imagenet", slots=2, trials=10, epochs=4, epoch_seconds=30.0,
                                  preset="imagenet", precision="bf16", accelerator_model="NVIDIA H100 80GB HBM3",
                                  accelerator_count=2, devices_per_slot=1, declared_peak=2 * 989.4e12).path,
    }


def report(path: Path, **kw: Any) -> str:
    return json.dumps(verify_module.verify(path, witness_keys=WITNESS.keys, **kw), sort_keys=True)


def record_folds(monkeypatch: pytest.MonkeyPatch) -> list[fastfold.Fold]:
    """Every Fold verify() makes from now on (its state after the fold, the epochs it folded at once)."""
    made: list[fastfold.Fold] = []
    init = fastfold.Fold.__init__

    def spy(self: fastfold.Fold, *a: Any, **kw: Any) -> None:
        init(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(fastfold.Fold, "__init__", spy)
    return made


@pytest.fixture
def folds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[fastfold.Fold]]:
    yield record_folds(monkeypatch)


def reports_alike(path: Path, monkeypatch: pytest.MonkeyPatch, modes: list[tuple[int, int]]) -> None:
    monkeypatch.setattr(verify_module, "FAST_FOLD", False)
    expected = report(path, workers=1)
    monkeypatch.setattr(verify_module, "FAST_FOLD", True)
    monkeypatch.setattr(logchunks, "MIN_PARALLEL", 0)
    for workers, chunk in modes:
        monkeypatch.setattr(logchunks, "CHUNK", chunk)
        assert report(path, workers=workers) == expected, (workers, chunk)


@pytest.mark.parametrize("name", list(DAMAGE))
def test_damaged_logs_report_alike(name: str, bases: dict[str, Path], tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch, folds: list[fastfold.Fold]) -> None:
    run = damaged(bases["witnessed"], tmp_path / "run", name)
    reports_alike(run, monkeypatch, [(1, 1500), (1, 7000)])
    assert folds[-1].fast and sum(f.free_epochs for f in folds) > 0  # the chunked fold did fold epochs


@pytest.mark.parametrize("base", ["v1-unfinished", "imagenet-peak", "in-step"])
@pytest.mark.parametrize("name", ["intact", "accelerators", "time-back", "epoch-repeated", "too-fast", "int-fields"])
def test_other_runs_report_alike(base: str, name: str, bases: dict[str, Path], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    reports_alike(damaged(bases[base], tmp_path / "run", name), monkeypatch, [(1, 1200), (1, 6000)])


@pytest.mark.parametrize("name", ["intact", "garbage-mid-chunk", "lines-swapped", "truncated", "accelerators"])
def test_workers_report_alike(name: str, bases: dict[str, Path], tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks scanned by two worker processes, the trials' files read by them too."""
    monkeypatch.setattr(runio, "PREFETCH_MIN_TRIALS", 1)
    monkeypatch.setattr(runio, "PREFETCH_MIN_DISTINCT", 1)
    reports_alike(damaged(bases["witnessed"], tmp_path / "run", name), monkeypatch, [(2, 3000)])


def test_trial_files_read_in_workers_report_alike(bases: dict[str, Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """hparams.json and graph.json problems are reported alike when the prefetch pool reads the files."""
    run = tmp_path / "run"
    shutil.copytree(bases["witnessed"], run)
    (run / "trials" / "t0002" / "graph.json").unlink()
    (run / "trials" / "t0003" / "hparams.json").write_text("{not json")
    (run / "trials" / "t0004" / "hparams.json").write_text("[1]")
    (run / "trials" / "t0005" / "hparams.json").unlink()
    hp = json.loads((run / "trials" / "t0006" / "hparams.json").read_text())
    (run / "trials" / "t0006" / "hparams.json").write_text(json.dumps({**hp, "lr": 9.0, "kernel_size": 5}))
    (run / "trials" / "t0007" / "graph.json").write_text("{}")
    expected = report(run, workers=1)
    monkeypatch.setattr(runio, "PREFETCH_MIN_TRIALS", 1)
    monkeypatch.setattr(runio, "PREFETCH_MIN_DISTINCT", 1)
    got = report(run, workers=2)
    assert got == expected
    bound = next(c for c in json.loads(got)["checks"] if c["name"] == "integrity.bound")
    assert not bound["passed"] and "t0003/hparams.json" in bound["message"]


def fold_state(path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool, chunk: int = 2000) -> str:
    """Everything the fold of a verification leaves: the replay (what the service stores its trials
    from), the score's table in its order, the audit's, the fingerprints' and the witness's state."""
    monkeypatch.setattr(verify_module, "FAST_FOLD", fast)
    monkeypatch.setattr(logchunks, "MIN_PARALLEL", 0)
    monkeypatch.setattr(logchunks, "CHUNK", chunk)
    folds = record_folds(monkeypatch)
    replay = verify_module.verify_run(path, workers=1, witness_keys=WITNESS.keys).replay
    fold = folds[-1]

    def canon(v: Any) -> Any:
        if hasattr(v, "messages") and hasattr(v, "count"):  # Findings
            return ("findings", v.count, v.messages)
        if isinstance(v, dict):
            return sorted((repr(k), canon(x)) for k, x in v.items())
        if isinstance(v, (list, tuple, set)):
            return [canon(x) for x in (sorted(v, key=repr) if isinstance(v, set) else v)]
        if hasattr(type(v), "__slots__") and not isinstance(v, (str, bytes, int, float)):
            return canon({name: getattr(v, name) for name in type(v).__slots__})
        return v

    def plain(obj: Any, *skip: str) -> Any:
        return canon({k: v for k, v in vars(obj).items() if k not in skip and not k.startswith("_on_")})

    table = fold.acc.table
    state = {"replay": plain(replay, "trials", "unproposed"),
             "trials": [canon(tr) for tr in replay.all_trials()],
             "table": (table.ended_at.tobytes(), table.work.tobytes(), table.accuracy.tobytes()),
             "work": fold.acc.work, "uncounted": fold.acc.uncounted_epochs,
             "audit": plain(fold.audit, "replay", "th", "flops_for", "slot_peak", "_slot_peaks"),  # (a memo)
             "fingerprints": (fold.fingerprints.digests, fold.fingerprints._counted),
             "witness": plain(fold.witness, "replay", "witness_keys")}
    return repr(state)


@pytest.mark.parametrize("name", ["intact", "accelerators", "epoch-repeated", "finished-early", "slot-lost",
                                  "clash-on-slot", "clash-on-a-quiet-slot", "repeat-after-epochs", "int-fields",
                                  "truncated", "times-back", "heartbeat-before-epoch"])
@pytest.mark.parametrize("base", ["witnessed", "in-step", "two-devices"])
def test_fold_states_alike(name: str, base: str, bases: dict[str, Path], tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only the report: the replay (the service's trials), the score's table entry by entry in
    its order (equal end times keep it), the audit's findings and the witness's windows."""
    run = damaged(bases[base], tmp_path / "run", name)
    for chunk in (900, 4000):
        assert fold_state(run, monkeypatch, True, chunk) == fold_state(run, monkeypatch, False)


FIELDS = ["attempt", "ended_at", "epoch", "images_evaluated", "images_trained", "seconds", "started_at", "t", "trial",
          "val_accuracy", "val_loss", "accelerators", "x"]
VALUES = st.one_of(st.sampled_from([0, 1, 2, -1, 0.0, -0.0, 1.0, 0.5, 1e308, 2**63, 2**64 + 1, True, None, "", "t0001",
                                    "t9999", [], {}, {"cpu": 1}]),
                   st.floats(allow_nan=False, allow_infinity=False), st.integers(-10, 10**6))


@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 130), st.sampled_from(FIELDS), VALUES), min_size=1, max_size=6),
       st.sampled_from([900, 2500]))
def test_any_epoch_edits_report_alike(bases: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
                                      edits: list[tuple[int, str, Any]], chunk: int) -> None:
    """Epoch lines with any value in any field (re-chained): the same report either way."""
    run = tmp_path_factory.mktemp("edit") / "run"
    shutil.copytree(bases["witnessed"], run)
    log = run / "events.jsonl"
    lines = log.read_bytes().split(b"\n")[:-1]
    at = epochs_at(lines)
    for k, key, value in edits:
        i = at[k % len(at)]
        d = json.loads(lines[i])
        d[key] = value
        lines[i] = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
    log.write_bytes(b"\n".join(rechain(lines)) + b"\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(verify_module, "FAST_FOLD", False)
        expected = report(run, workers=1)
        mp.setattr(verify_module, "FAST_FOLD", True)
        mp.setattr(logchunks, "MIN_PARALLEL", 0)
        mp.setattr(logchunks, "CHUNK", chunk)
        assert report(run, workers=1) == expected


def test_a_heartbeat_ending_a_chunk(bases: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A heartbeat as a chunk's last line: its hash is the next chunk's first epoch's prev."""
    run = damaged(bases["witnessed"], tmp_path / "run", "heartbeat-before-epoch")
    raw = (run / "events.jsonl").read_bytes()
    end = raw.index(b"\n", raw.index(b'"type":"heartbeat","work":1.0')) + 1  # just after the inserted heartbeat
    for chunk in (end - 1, end - 60):  # the first chunk cut right after it; a later one
        assert fold_state(run, monkeypatch, True, chunk) == fold_state(run, monkeypatch, False)


def test_equal_rates_to_peak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two epochs at the same, highest rate to peak at different rates (the first on 1 device over
    20 s, the other on 2 over 10 s; that one held): the fastest epoch reported is the first."""
    from devdata.runfactory import RunBuilder

    b = RunBuilder(tmp_path / "run", slots=2, preset="imagenet", precision="bf16",
                   accelerator_model="NVIDIA H100 80GB HBM3", accelerator_count=4, devices_per_slot=2,
                   declared_peak=4 * 989.4e12)
    for tid in ("t0000", "t0001"):
        b.trial(tid, 1.0)
    b.start_trial("t0000", 2.0, slot=0, devices=2)
    b.start_trial("t0001", 2.0, slot=1, devices=1)
    for e in range(1, 40):
        end = 30.0 + 30 * e
        fast = e == 30  # both twice as fast: the new highest rate to peak, reached twice in one chunk
        for tid, seconds in (("t0001", 20.0), ("t0000", 10.0)):
            extra = {"accelerators": {"NVIDIA H100 80GB HBM3": 2}} if (tid, e) == ("t0000", 30) else {}
            b.epoch(tid, e, started_at=end - seconds / (2 if fast else 1), ended_at=end, trained=1000,
                    evaluated=50_000, accuracy=0.5, t=end + 0.5, **extra)
    b.finish_trial("t0000", 1300.0, epochs=39, best=0.5)
    b.finish_trial("t0001", 1300.0, epochs=39, best=0.5)
    run = b.close(finish_t=1301.0)
    for chunk in (1500, 4000, 20000):
        assert fold_state(run, monkeypatch, True, chunk) == fold_state(run, monkeypatch, False)


def test_a_full_fingerprint_sample(bases: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sample's last places taken in line order by held and free epochs alike (a sample of 7,
    most epochs candidates)."""
    from aiperf_runner.spec import epochplan, fingerprint

    for module in (fingerprint, fastfold, epochplan):  # the first 2, then 1 in 3: 7 at most
        for name, value in (("MOST", 7), ("FIRST", 2), ("EVERY", 3)):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, value)
    for name in ("intact", "accelerators", "int-fields"):
        reports_alike(damaged(bases["in-step"], tmp_path / name, name), monkeypatch, [(1, 900), (1, 3000)])
