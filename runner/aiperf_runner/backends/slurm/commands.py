"""The SLURM client commands the slurm backend runs, and how it reads what they print.

`run_slurm` runs sbatch, squeue, scancel, sinfo, sacct or scontrol (with retries and one error type,
`SlurmError`); `parse_sinfo_nodes` and `parse_squeue` read their `-o` formats; the job states below
say whether a job still holds or waits for nodes and, when it ended without its own exit status, why.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aiperf_runner.spec.errors import AiperfError

COMMAND_TIMEOUT_S = 60.0

# squeue/scontrol states of a job that still holds or waits for nodes.
ACTIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
})
# Final states that say why a job ended without (or regardless of) its own exit status.
FAILURE_REASONS = {
    "CANCELLED": "job cancelled (scancel or an administrator)",
    "TIMEOUT": "job reached its time limit",
    "NODE_FAIL": "node failure",
    "PREEMPTED": "job preempted",
    "BOOT_FAIL": "node failed to boot",
    "DEADLINE": "job reached its deadline",
    "OUT_OF_MEMORY": "job ran out of memory",
    "REVOKED": "job revoked",
}
USABLE_NODE_STATES = frozenset({"idle", "mixed", "allocated", "completing", "planned"})
# How sinfo shows the idle nodes of an active reservation: usable by a run inside that reservation.
RESERVED_STATE = "reserved"


class SlurmError(AiperfError, OSError):
    """A SLURM command failed (sbatch refused the job, the controller daemon is unreachable...)."""


def slurm_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for SLURM commands and jobs: the controller's, without the variables of an
    allocation it may itself run in (so a job submitted from inside a job is a job of its own)."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("SLURM_") and k not in ("SLURM_CONF", "SLURM_TIME_FORMAT"))}
    env.update(extra or {})
    return env


def run_slurm(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
              timeout: float = COMMAND_TIMEOUT_S, tries: int = 1) -> str:
    """Run a SLURM client command and return its stdout; SlurmError with its stderr on failure."""
    last = ""
    for attempt in range(tries):
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  env=env or slurm_env(), cwd=cwd, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]} not found: is this a SLURM login node (slurm client installed)?") from None
        except subprocess.TimeoutExpired:
            last = f"{' '.join(argv[:2])} timed out after {timeout:.0f} s"
        else:
            if proc.returncode == 0:
                return proc.stdout
            last = (proc.stderr or proc.stdout).strip() or f"exit status {proc.returncode}"
        if attempt + 1 < tries:
            time.sleep(min(2.0 * (attempt + 1), 5.0))
    raise SlurmError(f"{argv[0]}: {last}")


def slurm_version() -> str | None:
    """`sinfo -V` ('slurm-wlm 22.05.8'), or None when it does not answer."""
    try:
        return run_slurm(["sinfo", "-V"]).strip() or None
    except SlurmError:
        return None


def scancel(job_ids: Iterable[str]) -> None:
    """One scancel for all these jobs or steps (`JOB.STEP`), ignoring errors (it also fails when
    one of them is already over, and still cancels the others)."""
    ids = sorted(set(job_ids), key=lambda i: tuple(int(n) for n in re.findall(r"\d+", i)))
    if ids:
        with contextlib.suppress(SlurmError):
            run_slurm(["scancel", *ids])


def count_gpus(gres: str) -> int:
    """GPUs in a sinfo GRES string: 'gpu:4', 'gpu:a100:4(S:0-1),nic:1' -> 4; '(null)' -> 0."""
    total = 0
    for item in re.split(r",(?![^()]*\))", gres or ""):
        m = re.match(r"gpu(?::[^:()]+)?:(\d+)", item.strip())
        if m:
            total += int(m.group(1))
    return total


def node_usable(state: str, usable_states: frozenset[str] = USABLE_NODE_STATES) -> bool:
    """Whether a node in this sinfo state (`idle`, `down*`, `drained`...) takes jobs: its base state
    is usable and it responds (`*`: not responding)."""
    base = re.sub(r"[*~#!%$@^+-]+$", "", state.lower())
    return base in usable_states and not state.endswith("*")


def failed_nodes(nodes: Iterable[str]) -> list[str]:
    """Of `nodes`, those SLURM now reports unusable (down, drained, failing, not responding), in
    sinfo's order; [] when sinfo does not answer (a failure is then taken as the attempt's own)."""
    names = sorted(set(nodes))
    if not names:
        return []
    try:
        text = run_slurm(["sinfo", "-h", "-N", "-n", ",".join(names), "-o", "%N|%T"])
    except SlurmError:
        return []
    found: list[str] = []
    for line in text.splitlines():
        name, _, state = line.strip().partition("|")
        if name in names and name not in found and not node_usable(state, USABLE_NODE_STATES | {RESERVED_STATE}):
            found.append(name)
    return found


def parse_sinfo_nodes(text: str, reserved_usable: bool = False) -> list[dict[str, Any]]:
    """Lines of `sinfo -h -N -o '%N|%T|%c|%m|%G[|%b]'` -> one dict per node (first line of each
    name); `features` from the optional sixth field (active features). `reserved` nodes are usable
    only with `reserved_usable` (the run asks for their reservation)."""
    nodes: dict[str, dict[str, Any]] = {}
    usable_states = USABLE_NODE_STATES | {RESERVED_STATE} if reserved_usable else USABLE_NODE_STATES
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5 or parts[0] in nodes:
            continue
        name, state, cpus, mem, gres = parts[:5]
        features = parts[5] if len(parts) > 5 and parts[5] != "(null)" else ""
        nodes[name] = {
            "name": name, "state": state.lower(),
            "usable": node_usable(state, usable_states),
            "cpus": int(cpus) if cpus.isdigit() else 0,
            "memory_mb": int(mem) if mem.isdigit() else 0,
            "gres": gres if gres != "(null)" else "",
            "gpus": count_gpus(gres),
            "features": {f for f in features.split(",") if f},
        }
    return list(nodes.values())


def parse_squeue(text: str) -> dict[str, dict[str, str]]:
    """Lines of `squeue -h -o '%i|%T|%r|%N|%j'` -> {job id: {state, reason, nodes, name}}."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 4 and parts[0]:
            out[parts[0]] = {"state": parts[1].split()[0] if parts[1] else "", "reason": parts[2],
                             "nodes": parts[3], "name": parts[4] if len(parts) > 4 else ""}
    return out


def describe_state(state: str, reason: str = "") -> str:
    """A short reason for a job that ended in `state`."""
    text = FAILURE_REASONS.get(state) or (f"job {state.lower()}" if state else "job ended")
    if reason and reason not in ("None", "(null)") and reason.lower() not in text.lower():
        text = f"{text} ({reason})"
    return text
