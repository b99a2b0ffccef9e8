"""A fast stand-in for the trial program (same files, same log lines, no torch).

    python -m tests.runner.fake_trial TRIAL_DIR --attempt N [--nproc K]

Each epoch sleeps $FAKE_EPOCH_S seconds (default 0.05) and appends an `epoch_end` line to
TRIAL_DIR/events.jsonl (after its stand-in `epoch_states`); the accuracy rises with the epoch and depends on the architecture. Like the
real program it continues after the last epoch it logged (its "checkpoint") and ends with
`trial_result` (with the digest of a stand-in weights file). Failures on demand, by trial and attempt ("t0002@1,t0005@*"):
$FAKE_TRIAL_FAIL logs `trial_error` after the first epoch and exits 1; $FAKE_TRIAL_CRASH exits 9
with a message on stderr and nothing in the log (a killed or crashed process). $FAKE_CHECKPOINT=1
writes a stand-in `checkpoint.pt` every epoch and leaves it behind at the end (as a real program
killed in teardown would): the controller deletes it. With `run --stage-data` it stages and checks
the data on its node first (data/staging.py), logging a refused copy as `trial_error`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

from aiperf_runner.data.staging import StageError, node_name, stage_for_trial
from aiperf_runner.rundir.privacy import run_masker
from aiperf_runner.spec.eventlog import EventWriter, iter_events
from aiperf_runner.spec.proof import stand_in_states
from aiperf_runner.spec.records import EpochEnd


def _matches(spec: str, trial: str, attempt: int) -> bool:
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, which = item.partition("@")
        if name == trial and which in ("*", str(attempt), ""):
            return True
    return False


def accuracy(graph_bytes: bytes, epoch: int) -> float:
    quality = int(hashlib.sha256(graph_bytes).hexdigest()[:4], 16) / 0xFFFF  # 0..1 per architecture
    return round(min(0.99, 0.5 + 0.08 * epoch + 0.1 * quality), 4)


def main(argv: list[str] | None = None, cancel: threading.Event | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("trial_dir", type=Path)
    parser.add_argument("--attempt", type=int, default=1)
    parser.add_argument("--nproc", type=int, default=1)
    args = parser.parse_args(argv)
    trial_dir: Path = args.trial_dir
    cfg = json.loads((trial_dir / "trial.json").read_text())
    graph_bytes = (trial_dir / "graph.json").read_bytes()
    trial, attempt = cfg["trial"], args.attempt
    epoch_s = float(os.environ.get("FAKE_EPOCH_S", "0.05"))
    events = trial_dir / "events.jsonl"
    done = 0
    if events.exists():
        for ev in iter_events(events, allow_partial_tail=True):
            if ev.data["type"] == "epoch_end":
                done = max(done, ev.data["epoch"])
    budget = int(cfg["epoch_budget"])
    val_images = int(cfg["dataset"].get("val_images") or 100)
    if cancel is None:  # a real process: tests check that it is gone after a cancel or a resume
        (trial_dir / f"fake_pid.{attempt}").write_text(str(os.getpid()))
    try:  # run --stage-data: stage and check this node's copy, as the real program does before loading data
        staged = stage_for_trial(trial_dir.parent.parent)
    except StageError as exc:
        with EventWriter(events) as log:
            log.append("trial_error", trial=trial, attempt=attempt,
                       error=run_masker(trial_dir.parent.parent).text(f"StageError: {exc}")[:2000])
        return 1
    if staged is not None:
        print(f"data: {staged} ({sum(1 for p in staged.rglob('*') if p.is_file())} files) on {node_name()}",
              flush=True)
    if _matches(os.environ.get("FAKE_TRIAL_CRASH", ""), trial, attempt):
        # Like a real traceback: it names the trial's absolute path, the home directory and the host.
        print(f'  File "{trial_dir.resolve()}/model.py", line 1, in forward\n'
              f'  File "{Path.home()}/.local/lib/site.py", line 2\n'
              f"fake crash of {trial} attempt {attempt} on {socket.gethostname()}", file=sys.stderr, flush=True)
        return 9
    with EventWriter(events) as log:
        best = 0.0
        for epoch in range(done + 1, budget + 1):
            started = time.time()
            if cancel is not None:
                if cancel.wait(epoch_s):
                    return 1
            else:
                time.sleep(epoch_s)
            if os.environ.get("FAKE_CHECKPOINT"):  # a stand-in for the real program's checkpoint.pt
                (trial_dir / "checkpoint.pt").write_bytes(graph_bytes)
            acc = accuracy(graph_bytes, epoch)
            best = max(best, acc)
            ended = time.time()
            if cfg.get("commit_every_steps"):  # stand-ins: the fake trains nothing to commit
                log.append("epoch_states", **stand_in_states(trial, attempt, epoch, 50, int(cfg["commit_every_steps"])))
            log.append("epoch_end", **EpochEnd(trial=trial, attempt=attempt, epoch=epoch, images_trained=50,
                                               images_evaluated=val_images, val_accuracy=acc,
                                               val_loss=round(2.0 - acc, 4), started_at=started, ended_at=ended,
                                               seconds=ended - started).as_event())
            if _matches(os.environ.get("FAKE_TRIAL_FAIL", ""), trial, attempt):
                log.append("trial_error", trial=trial, attempt=attempt, error="RuntimeError: fake failure")
                return 1
        best = max([best] + [accuracy(graph_bytes, e) for e in range(1, done + 1)])
        # Stand-in weights (not safetensors): the controller's retention only needs a file and its digest.
        weights = trial_dir / "weights.safetensors"
        weights.write_bytes(hashlib.sha256(graph_bytes).digest() * 64)
        log.append("trial_result", trial=trial, attempt=attempt, epochs=budget, best_accuracy=best, reason="budget",
                   weights_sha256=hashlib.sha256(weights.read_bytes()).hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main())
