"""The launcher template on real clusters: a prologue (`--prologue`) and a wrapper (`--wrap`, a stand-in
for `apptainer exec`) that leave a marker per trial attempt and node, so that each is seen to have
run, in order (the wrapper sees what the prologue exported), with the trial's nodes passed in and
without the SLURM client on the wrapped process's PATH. One-node run ~25 s; two-node attempt ~15 s."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from aiperf_runner.backends.slurm import SlurmBackend
from aiperf_runner.rundir.privacy import read_hostnames

from tests.backends.test_conformance import spec_for, wait_done
from tests.slurm.cluster import read_events, run_to_end, verify_ok

PROLOGUE = """\
# A site prologue: proves it ran on this node for this attempt, and exports a variable for the trial.
echo "$AIPERF_NODES" > "$MARKERS/prologue.$AIPERF_TRIAL.$AIPERF_ATTEMPT.$SLURMD_NODENAME"
export FROM_PROLOGUE=yes
"""
WRAPPER = """\
#!/bin/bash
# A stand-in for `apptainer exec IMAGE`: proves it ran, then runs the trial with no SLURM client on PATH.
echo "prologue=$FROM_PROLOGUE nodes=$AIPERF_NODES argv=$*" > "$MARKERS/wrap.$AIPERF_TRIAL.$AIPERF_ATTEMPT.$SLURMD_NODENAME"
PATH=/nonexistent exec "$@"
"""


def launcher_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    markers = tmp_path / "markers"
    markers.mkdir()
    prologue, wrapper = tmp_path / "site-prologue.sh", tmp_path / "fake-apptainer"
    prologue.write_text(PROLOGUE)
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    return markers, prologue, wrapper


def test_prologue_and_wrapper_run_for_every_trial(one_node: Path, tmp_path: Path) -> None:
    markers, prologue, wrapper = launcher_files(tmp_path)
    run_dir = tmp_path / "run"
    run_to_end(one_node, run_dir, "--preset", "smoke", "--duration", "12s", "--slots", "2",
               "--backend-opt", "exclusive=false", "--prologue", str(prologue), "--wrap", f"{wrapper} --nv",
               "--rdzv-iface", "lo",  # recorded; one-node trials have no rendezvous to move
               "--trial-module", "tests.runner.fake_trial", FAKE_EPOCH_S="1", MARKERS=str(markers))
    events = read_events(run_dir)
    # The attempts that ran to their end (one cancelled at the end of the run may not have started).
    ended = {(e["trial"], e["attempt"]) for e in events if e["type"] in ("trial_finished", "trial_failed")}
    started = [e for e in events if e["type"] == "trial_started" and (e["trial"], e["attempt"]) in ended]
    assert len(started) >= 2
    raw = {pseudonym: name for name, pseudonym in read_hostnames(run_dir).items()}
    for e in started:
        node = raw[e["nodes"][0]]  # the log names nodes by pseudonym; the markers by name
        tag = f"{e['trial']}.{e['attempt']}.{node}"
        assert (markers / f"prologue.{tag}").read_text().strip() == node
        wrapped = (markers / f"wrap.{tag}").read_text()
        assert wrapped.startswith(f"prologue=yes nodes={node} argv=--nv "), wrapped
        assert f"-m tests.runner.fake_trial {run_dir / 'trials' / e['trial']}" not in wrapped  # relative paths
        assert f"trials/{e['trial']} --attempt {e['attempt']}" in wrapped
    launcher = json.loads((run_dir / "run.json").read_text())["system"]["slurm"]["launcher"]
    assert launcher == {"prologue": "local/slurm-prologue.sh", "trial_python": None,
                        "prologue_sha256": hashlib.sha256(PROLOGUE.encode()).hexdigest(),
                        "wrap": [".../fake-apptainer", "--nv"], "rdzv_iface": "lo"}  # the path masked (rundir/privacy.py)
    assert str(tmp_path) not in (run_dir / "run.json").read_text()
    assert (run_dir / "local" / "slurm-prologue.sh").read_text() == PROLOGUE  # kept, never bundled
    verify_ok(run_dir)


def test_prologue_and_wrapper_on_both_nodes_of_a_two_node_trial(two_node: Path, tmp_path: Path, monkeypatch) -> None:
    markers, prologue, wrapper = launcher_files(tmp_path)
    monkeypatch.setenv("MARKERS", str(markers))
    (tmp_path / "run").mkdir()
    backend = SlurmBackend(tmp_path / "run", nodes_per_slot=2, probe=False, exit_file_grace_s=5,
                           prologue=str(prologue), wrap=str(wrapper))
    spec = spec_for(backend, "t0000", "ok")
    try:
        handle = backend.launch(spec, backend.slots()[0])
        assert wait_done(handle, timeout=90) == 0, spec.stderr.read_text()[-2000:]
    finally:
        backend.shutdown()
    for node in ("n1", "n2"):  # torchrun on each node, each sourcing the prologue inside its srun task
        assert (markers / f"prologue.t0000.1.{node}").read_text().strip() == "n1,n2"
        wrapped = (markers / f"wrap.t0000.1.{node}").read_text()
        assert wrapped.startswith("prologue=yes nodes=n1,n2 argv=") and "torch.distributed.run" in wrapped, wrapped
    assert (spec.trial_dir / "out" / "done").exists()
