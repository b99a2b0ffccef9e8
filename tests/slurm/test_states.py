"""How the slurm backend reads SLURM's answers (no cluster needed: squeue is faked)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from aiperf_runner.backends.base import LaunchSpec, Slot
from aiperf_runner.backends.slurm import SlurmBackend, SlurmHandle, count_gpus, parse_sinfo_nodes, parse_squeue
from aiperf_runner.backends.slurm import backend as mod
from aiperf_runner.backends.slurm.placement import constraint_matches


def test_gres_and_sinfo_parsing() -> None:
    assert count_gpus("(null)") == 0
    assert count_gpus("gpu:4") == 4
    assert count_gpus("gpu:a100:4(S:0-1),nic:1") == 4
    assert count_gpus("gpu:a100:2(S:0),gpu:v100:2(S:1)") == 4
    nodes = parse_sinfo_nodes("n1|idle|8|64000|gpu:2\nn2|down*|8|64000|gpu:2\nn3|mixed|8|64000|(null)\n"
                              "n4|drained|8|0|(null)\nn5|idle~|4|1000|(null)\nn6|allocated*|4|1000|(null)\n"
                              "n1|idle|8|64000|gpu:2\n")
    assert [n["name"] for n in nodes] == ["n1", "n2", "n3", "n4", "n5", "n6"]  # n1 once
    assert [n["name"] for n in nodes if n["usable"]] == ["n1", "n3", "n5"]
    assert nodes[0]["gpus"] == 2 and nodes[0]["cpus"] == 8 and nodes[2]["gres"] == ""


def test_squeue_parsing() -> None:
    jobs = parse_squeue("12|RUNNING|None|n[1-2]|aiperf.0123abcd.t0001\n13|CANCELLED by 0|None||x\n")
    assert jobs["12"] == {"state": "RUNNING", "reason": "None", "nodes": "n[1-2]", "name": "aiperf.0123abcd.t0001"}
    assert jobs["13"]["state"] == "CANCELLED"


def fake_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: dict[str, dict[str, str] | None],
                 **options) -> SlurmBackend:
    backend = SlurmBackend(tmp_path, exit_file_grace_s=0, **options)
    monkeypatch.setattr(backend, "job_info", lambda job_id, fresh=False: answers.get(job_id))
    monkeypatch.setattr(backend, "final_state", lambda job_id, trial_id: answers.get("final"))
    monkeypatch.setattr(mod, "run_slurm", lambda argv, **kw: pytest.fail(f"unexpected SLURM command {argv}"))
    return backend


def handle_for(backend: SlurmBackend, job_id: str = "7", trial: str = "t0000") -> SlurmHandle:
    trial_dir = backend.run_dir / "trials" / trial
    trial_dir.mkdir(parents=True, exist_ok=True)
    spec = LaunchSpec(trial, 1, (sys.executable, "-c", "pass"), trial_dir, trial_dir / "out", trial_dir / "err")
    return SlurmHandle(backend, spec, Slot(0, ("n1",)), job_id, trial_dir / "slurm-1")


def job(state: str, reason: str = "None", nodes: str = "n2") -> dict[str, str]:
    return {"state": state, "reason": reason, "nodes": nodes, "name": "aiperf.x.t0000"}


@pytest.mark.parametrize("state, words", [
    ("CANCELLED", "cancelled"), ("NODE_FAIL", "node failure"), ("PREEMPTED", "preempted"),
    ("TIMEOUT", "time limit"), ("OUT_OF_MEMORY", "out of memory"), ("BOOT_FAIL", "boot"),
])
def test_end_states_are_failures_with_a_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str,
                                               words: str) -> None:
    handle = handle_for(fake_backend(tmp_path, monkeypatch, {"7": job(state)}))
    rc = handle.poll()
    assert rc is not None and rc != 0
    assert words in handle.describe_failure() and "SLURM job 7" in handle.describe_failure()
    assert handle.poll() == rc


@pytest.mark.parametrize("reason", ["None", "NodeDown"])
def test_a_node_failure_names_the_node_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reason: str) -> None:
    """Whatever reason squeue adds to NODE_FAIL ("node failure (NodeDown)"), the attempt lost its node."""
    handle = handle_for(fake_backend(tmp_path, monkeypatch, {"7": job("NODE_FAIL", reason)}))
    monkeypatch.setattr(mod, "failed_nodes", lambda nodes: [n for n in nodes if n == "n2"])
    assert handle.poll() == 1 and handle.lost_node() == "n2"
    other = handle_for(fake_backend(tmp_path, monkeypatch, {"8": job("TIMEOUT")}), "8")
    assert other.poll() == 1 and other.lost_node() is None


def test_running_pending_and_a_silent_squeue_mean_not_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answers: dict[str, dict[str, str] | None] = {"7": job("PENDING", "Resources", "")}
    handle = handle_for(fake_backend(tmp_path, monkeypatch, answers))
    assert handle.poll() is None and handle.nodes == ["n1"]  # nominal until the job starts
    answers["7"] = None  # squeue failed: keep waiting rather than declare the trial dead
    assert handle.poll() is None
    answers["7"] = job("RUNNING")
    assert handle.poll() is None and handle.nodes == ["n2"]


def test_the_exit_file_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = fake_backend(tmp_path, monkeypatch, {"7": job("COMPLETING")})
    handle = handle_for(backend)
    (handle.prefix.parent / "slurm-1.exit").write_text("3\n")
    assert handle.poll() == 3 and handle.describe_failure() == "exit status 3 [SLURM job 7]"
    handle2 = handle_for(backend, "8")
    (handle2.prefix.parent / "slurm-1.exit").write_text("0\n")
    assert handle2.poll() == 0 and handle2.describe_failure() == ""


def test_a_job_without_exit_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answers: dict[str, dict[str, str] | None] = {"7": job("COMPLETED"), "8": job("FAILED", "NonZeroExitCode"),
                                                 "9": job(""), "final": job("TIMEOUT")}
    backend = fake_backend(tmp_path, monkeypatch, answers)
    assert handle_for(backend, "7").poll() == 0
    failed = handle_for(backend, "8")
    assert failed.poll() == 1 and "failed" in failed.describe_failure()
    gone = handle_for(backend, "9")  # squeue forgot it: the completion log (or sacct) tells
    assert gone.poll() == 1 and "time limit" in gone.describe_failure()
    answers["final"] = None
    lost = handle_for(backend, "10")
    answers["10"] = job("")
    assert lost.poll() == 1 and "vanished" in lost.describe_failure()


def test_wait_changed_names_an_attempt_at_its_exit_file_and_each_once_per_squeue_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller reads an attempt when its exit file appears (at once here, by inotify; within
    2 s by stat when the job writes it on another node) and polls every attempt once per squeue
    interval, so that the handles see squeue's answers. ~3 s."""
    backend = fake_backend(tmp_path, monkeypatch, {"7": job("RUNNING"), "8": job("RUNNING")}, squeue_interval_s=1.5)
    ended, running = handle_for(backend, "7", "t0000"), handle_for(backend, "8", "t0001")
    backend.track(ended)
    backend.track(running)
    assert backend.wait_changed(0.5) == set()
    ended.exit_file.write_text("0\n")
    written = time.monotonic()
    news = backend.wait_changed(3.0)
    assert news == {ended} and time.monotonic() - written <= 2.1
    assert ended.poll() == 0  # done: no longer watched
    news = backend.wait_changed(1.5)
    assert news == {running}, news
    assert running.poll() is None


def test_grace_for_a_shared_filesystem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = fake_backend(tmp_path, monkeypatch, {"7": job("COMPLETED")})
    backend.exit_file_grace_s = 60
    handle = handle_for(backend)
    assert handle.poll() is None  # the exit file may still be on its way
    (handle.prefix.parent / "slurm-1.exit").write_text("0\n")
    assert handle.poll() == 0


def test_options(tmp_path: Path) -> None:
    b = SlurmBackend(tmp_path, nodes_per_slot=2, devices_per_slot=4)
    assert b.devices_per_node == 2 and b.exclusive and b.max_slots is None
    g = SlurmBackend(tmp_path, gpus_per_node=8, devices_per_slot=1, slots=3, time_limit=90)
    assert g.devices_per_node == 8 and g.max_slots == 3 and g.time_limit == "90"
    with pytest.raises(ValueError):
        SlurmBackend(tmp_path, gpus_per_node=-1)


def test_a_failed_exit_waits_for_slurm_to_say_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answers: dict[str, dict[str, str] | None] = {"7": job("COMPLETING")}
    backend = fake_backend(tmp_path, monkeypatch, answers)
    backend.exit_file_grace_s = 60
    handle = handle_for(backend)
    (handle.prefix.parent / "slurm-1.exit").write_text("143\n")  # the trap ran; scancel's kill is under way
    assert handle.poll() is None
    answers["7"] = job("CANCELLED")
    assert handle.poll() == 143 and "cancelled" in handle.describe_failure()


def test_reserved_nodes_and_features() -> None:
    text = "n1|idle|8|1000|(null)|(null)\nn2|reserved|8|1000|(null)|a100,ib\nn3|reserved*|8|1000|(null)|a100\n"
    assert [n["name"] for n in parse_sinfo_nodes(text) if n["usable"]] == ["n1"]  # someone else's reservation
    assert [n["name"] for n in parse_sinfo_nodes(text, reserved_usable=True) if n["usable"]] == ["n1", "n2"]
    assert [n["features"] for n in parse_sinfo_nodes(text)] == [set(), {"a100", "ib"}, {"a100"}]


@pytest.mark.parametrize("constraint, features, matches", [
    ("a100", {"a100", "ib"}, True), ("a100&ib", {"a100"}, False), ("a100&ib", {"a100", "ib"}, True),
    ("v100|a100", {"a100"}, True), ("v100|h100", {"a100"}, False), ("[rack1|rack2]", set(), None),
    ("a100*2", {"a100"}, None), ("(a|b)&c", {"a"}, None),
])
def test_constraints(constraint: str, features: set[str], matches: bool | None) -> None:
    assert constraint_matches(constraint, features) is matches
