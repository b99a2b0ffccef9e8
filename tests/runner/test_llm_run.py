"""`aiperf-runner run --workload llm`: a short AIPerf-LLM run on this CPU (two slots, real trials: the seed, then
children grown from their parents' weights), verified by `spec.llmverify`; and copies of its log, re-chained as a
site holding the code could, each caught by the check named for it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from aiperf_runner.run.llmrun import LlmRun, LlmRunError, summary
from aiperf_runner.spec.eventlog import read_events
from aiperf_runner.spec.verify import verify

from devdata.runfactory import rewrite_events

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # one short run (tests/conftest.py llm_run), shared by the session


def _checks(report: dict[str, Any]) -> dict[str, bool]:
    return {c["name"]: c["passed"] for c in report["checks"]}


def test_a_short_run_trains_children_from_their_parents_and_verifies(llm_run):
    done = summary(llm_run)
    assert done["trials_finished"] >= 2 and done["morphisms"], done  # the seed, and a child grown from it
    report = verify(llm_run)
    checks = _checks(report)
    assert report["integrity_ok"], [c for c in report["checks"] if not c["passed"]]
    assert checks["validity.growth"] and checks["validity.trials"]
    plausibility = {name: ok for name, ok in checks.items() if name.startswith("plausibility.")}
    assert len(plausibility) == 6 and all(plausibility.values()), report["checks"]
    assert report["plausible"] and not report["rejected"]
    assert not checks["validity.duration"]  # under a minute is below the preset's minimum: valid runs are longer
    assert report["workload"] == "llm" and report["trials_finished"] == done["trials_finished"]
    assert report["flops"] == done["flops"] and report["score_ops"] == pytest.approx(
        done["flops"] / report["duration_s"])
    assert report["regulated_score_ops"] < report["score_ops"]  # the loss factor of a loss above ln 2 is < 1
    assert (llm_run / "trials" / report["best_trial"] / "weights.safetensors").exists()


def _forged(llm_run: Path, tmp_path: Path, edit) -> dict[str, Any]:
    forged = tmp_path / "forged"
    shutil.copytree(llm_run, forged)
    rewrite_events(forged, edit)
    return _checks(verify(forged))


def _first(events: list[dict[str, Any]], kind: str, child: bool = False) -> dict[str, Any]:
    return next(e for e in events if e["type"] == kind and (not child or e.get("growths")))


def _inflate_flops(events):
    _first(events, "train_end")["flops"] *= 2
    return events


def _more_tokens(events):
    line = _first(events, "train_end")
    line["tokens_trained"] += 64
    return events


def _other_arch(events):
    proposed = _first(events, "trial_proposed", child=True)
    proposed["arch"]["layers"][0]["mlp_hidden"] += 8
    return events


def _orphan(events):
    _first(events, "trial_proposed", child=True)["parent"] = "t0999"
    return events


def _loss_not_trained(events):
    finished = _first(events, "trial_finished")
    finished["val_loss"] = 0.5
    return events


def _broken_growth(events):
    _first(events, "train_end", child=True)["growth_gap"] = 0.3
    return events


def _cut_short(events):
    return [e for e in events if e["type"] != "run_finished"]


def _malformed(events):
    del _first(events, "train_end")["started_at"]
    return events


def _one_slot(events):
    for e in events:
        if e["type"] == "trial_started":
            e["slot"] = 0  # the run's two slots ran trials side by side: now they claim to share one
    return events


def _training_compressed(events):
    line = _first(events, "train_end")
    line["started_at"] = line["ended_at"] - 1e-4  # the trial's FLOPs in a tenth of a millisecond
    return events


def _clock_back(events):
    _first(events, "trial_proposed", child=True)["t"] -= 3600
    return events


def test_the_progress_display_shows_the_runs_own_figures(llm_run):
    """`run --workload llm --progress`: the display's last snapshot is the log's story (trials, best loss), and
    its status line speaks of loss, not accuracy or epochs."""
    import json

    from aiperf_runner.run.progress import LiveProgress, status_line
    from aiperf_runner.spec.eventlog import read_events

    snap = json.loads((llm_run.parent / "last-snapshot.json").read_text())
    losses = [e["val_loss"] for e in read_events(llm_run / "events.jsonl") if e["type"] == "trial_finished"]
    assert snap["finished"] and snap["finish_reason"] == "stopped" and snap["slots"] == 2
    assert snap["trials_finished"] == len(losses) and snap["best_loss"] == min(losses)
    assert snap["score_ops"] > 0 and snap["running"] == []
    line = status_line(snap)
    assert f"best loss {min(losses):.4f} nats" in line and "accuracy" not in line and "epochs" not in line
    assert "AIPerf-LLM" in LiveProgress.render(snap).title


@pytest.mark.parametrize("edit, caught_by", [
    (_one_slot, "plausibility.slot_exclusive"), (_training_compressed, "plausibility.trial_rate"),
    (_clock_back, "plausibility.timestamps"),
    (_inflate_flops, "integrity.flops"), (_more_tokens, "integrity.flops"),
    (_other_arch, "integrity.architecture"), (_orphan, "integrity.architecture"),
    (_loss_not_trained, "integrity.lifecycle"), (_broken_growth, "validity.growth"),
    (_cut_short, "integrity.lifecycle"), (_malformed, "integrity.lifecycle"),
])
def test_a_forged_log_is_caught(llm_run, tmp_path, edit, caught_by):
    checks = _forged(llm_run, tmp_path, edit)
    assert checks[caught_by] is False
    assert checks["integrity.log_chain"]  # re-chained: the story is wrong, not the chain


def test_a_changed_byte_breaks_the_chain(llm_run, tmp_path):
    forged = tmp_path / "forged"
    shutil.copytree(llm_run, forged)
    log = forged / "events.jsonl"
    log.write_bytes(log.read_bytes().replace(b'"val_loss":', b'"val_loss": ', 1))
    assert _checks(verify(forged))["integrity.log_chain"] is False


def test_a_killed_run_resumes_from_its_directory(llm_run, tmp_path):
    """A controller killed while a trial ran (its log cut after that trial's start): the resumed run logs the
    attempt failed, to be retried, and ends; its log verifies. A finished run is not resumed."""
    killed = tmp_path / "killed"
    shutil.copytree(llm_run, killed)

    def cut(events):
        last_start = max(i for i, e in enumerate(events) if e["type"] == "trial_started")
        return events[:last_start + 1]

    rewrite_events(killed, cut)
    run = LlmRun.resume(killed, say=lambda _: None)
    interrupted = [t for t in run.trials.values() if not t.done]
    assert interrupted
    # At once, whether or not its duration (LLM_RUN_MAX_S from the run's start) ran out while it was down: a
    # requested stop comes first (CI's serial phase reached this test after the duration once).
    run.request_stop()
    assert run.run() == "stopped"
    events = [e["type"] for e in read_events(killed / "events.jsonl")]
    assert "run_resumed" in events and events[-1] == "run_finished"
    checks = _checks(verify(killed))
    # The attempt the killed controller left open ended with it: its slot is free again for the retry.
    assert checks["plausibility.slot_exclusive"] and checks["plausibility.concurrency"]
    failed = [e for e in read_events(killed / "events.jsonl") if e["type"] == "trial_failed"]
    assert failed and failed[-1]["retry"] and "resumed" in failed[-1]["error"]
    assert verify(killed)["integrity_ok"]
    with pytest.raises(LlmRunError, match="nothing to resume"):
        LlmRun.resume(killed)

