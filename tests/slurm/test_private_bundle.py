"""A bundle of a SLURM run on the local cluster is private by default: unpacked, it names no host
of the cluster, no absolute path, no account and holds no checkpoint or weights; and it still
verifies, with the same score as the run directory. About 25 s (a 8 s run with the fake trial)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import tarfile
from pathlib import Path

from aiperf_runner.rundir.privacy import read_hostnames

from tests.slurm.cluster import RUNNER, env_for, finish, slurm, start_run

# An absolute path: a "/" not inside a word, a URL or "~/...", then two or more components.
ABS_PATH = re.compile(r"(?<![\w:/.~>\]-])/[\w.+@%=,-]+/[\w.+@%=,-]+")


def runner(conf: Path, cwd: Path, *args: str, **env: str) -> str:
    proc = subprocess.run([*RUNNER, *args], capture_output=True, text=True, env=env_for(conf, **env),
                          cwd=str(cwd), timeout=120)
    assert proc.returncode == 0, f"{args}: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    return proc.stdout


def test_bundle_of_a_slurm_run_is_private_and_verifies(one_node: Path, tmp_path: Path) -> None:
    env = {"AIPERF_CONFIG_DIR": str(tmp_path / "config"), "FAKE_EPOCH_S": "0.2", "FAKE_CHECKPOINT": "1",
           "FAKE_TRIAL_CRASH": "t0001@1"}  # a crash whose stderr names the trial's path, $HOME and the host
    runner(one_node, tmp_path, "keygen", **env)
    run_dir = tmp_path / "run"
    # 20 s: the backend asks squeue every 5 s, and t0001's crash must be seen (and logged) before the end.
    proc = start_run(one_node, run_dir, "--preset", "smoke", "--duration", "20s", "--account", "acct-kit-test",
                     "--trial-module", "tests.runner.fake_trial", cwd=tmp_path, **env)
    finish(proc, 120)
    # A finished run deletes its checkpoints; one a killed controller left behind must stay out of the bundle.
    assert not list(run_dir.glob("trials/*/checkpoint.pt")), "a finished run kept a checkpoint"
    (run_dir / "trials" / "t0000" / "checkpoint.pt").write_bytes(b"left by a killed controller")
    nodes = set(slurm(one_node, "sinfo", "-h", "-N", "-o", "%N").split())
    hosts = nodes | {socket.gethostname(), socket.getfqdn()} - {"localhost"}
    assert set(read_hostnames(run_dir)) >= nodes  # the raw names stay in local/

    listing = json.loads(runner(one_node, tmp_path, "pack", "run", "--list", "--json", **env))
    runner(one_node, tmp_path, "pack", "run", "-o", "run.tar.gz", **env)
    with tarfile.open(tmp_path / "run.tar.gz") as tar:
        members = tar.getnames()
        tar.extractall(tmp_path / "unpacked", filter="data")
    assert sorted(members) == sorted(r["path"] for r in listing["files"] if r["bundled"])
    assert not [m for m in members if m.endswith((".pt", ".safetensors", ".ckpt")) or "slurm-" in m
                or m.startswith("local/")]

    words = re.compile(r"(?<![\w.])(?:" + "|".join(re.escape(h.split(".")[0]) for h in hosts) + r")(?![\w-])")
    for path in (tmp_path / "unpacked").rglob("*"):
        if not path.is_file() or path.name == "MANIFEST.sig":  # base64 of a signature
            continue
        text = path.read_text(errors="replace")
        if path.name == "MANIFEST.json":  # its public key is base64, which may start with "/" and hold another
            text = text.replace(json.loads(text)["public_key"], "")
        where = path.relative_to(tmp_path / "unpacked")
        assert not words.search(text), f"{where} names a host: {words.search(text)}"
        assert not ABS_PATH.search(text), f"{where} holds an absolute path: {ABS_PATH.search(text)}"
        assert "acct-kit-test" not in text and str(tmp_path) not in text, where
    events = [json.loads(line) for line in (tmp_path / "unpacked" / "events.jsonl").read_text().splitlines()]
    assert any(e["type"] == "trial_failed" and "fake crash" in e["error"] for e in events)
    assert all(n.startswith("node-") for e in events if e["type"] == "trial_started" for n in e["nodes"])

    reports = [json.loads(runner(one_node, tmp_path, "verify", what, "--json", **env))
               for what in ("run", "run.tar.gz")]
    assert all(r["integrity_ok"] for r in reports)
    assert reports[0]["score_ops"] > 0 and reports[1]["score_ops"] == reports[0]["score_ops"]
