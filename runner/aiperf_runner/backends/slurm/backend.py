"""The slurm backend and its handles: one SLURM batch job per attempt, polled through squeue.

`SlurmBackend` finds the slots in the partition (sinfo), submits each attempt's batch script
(script.py) with sbatch, answers every handle's poll from one squeue call, and cancels what is left
at shutdown or after a killed controller: one `scancel` for all of them (attempts cancelled
together, as the controller's stop cancels every running one, share one too). `SlurmHandle.poll`
decides how an attempt ended: the exit file the script's EXIT trap writes first, SLURM's state
(commands.py) for why it ended without one.
The controller is told of an attempt's new log lines and exit file by `wait_changed` (filewatch.py:
stat with back-off, as the job writes them on another node), and of every attempt once per squeue
interval, so that its poll sees what squeue said.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiperf_runner.backends.base import Backend, LaunchSpec, Slot, TrialHandle
from aiperf_runner.backends.filewatch import FileWatch
from aiperf_runner.spec.runio import EVENTS
from aiperf_runner.util.hostlist import HostlistError, expand_hostlist

from .commands import (
    ACTIVE_STATES,
    FAILURE_REASONS,
    SlurmError,
    describe_state,
    failed_nodes,
    parse_squeue,
    run_slurm,
    scancel,
    slurm_env,
    slurm_version,
)
from .launcher import Launcher
from .options import SlurmOptions
from .placement import Placement, apply_probe, run_probe, usable_nodes
from .script import exclude_args, job_argv, job_path, memory_args, render_batch_script

JOB_PREFIX = "aiperf"
CANCELLED_STATUS = -15  # what poll() returns for an attempt cancelled through cancel()
# Attempts cancelled within this long of the first share its scancel (the controller's stop cancels
# every running attempt in one pass: one call for hundreds of jobs, not one each).
CANCEL_BATCH_S = 0.1
# At shutdown, a job still queued or running this long after its scancel is cancelled again (that
# scancel was lost); one being killed (COMPLETING) is only waited for.
RECANCEL_AFTER_S = 5.0
__all__ = ["CANCELLED_STATUS", "JOB_PREFIX", "SlurmBackend", "SlurmHandle"]


class SlurmHandle(TrialHandle):
    """One attempt = one SLURM job."""

    def __init__(self, backend: SlurmBackend, spec: LaunchSpec, slot: Slot, job_id: str, files_prefix: Path) -> None:
        self.backend = backend
        self.spec = spec
        self.slot = slot
        self.job_id = job_id
        self.prefix = files_prefix  # trials/<id>/slurm-<attempt>
        self._returncode: int | None = None
        self._reason = ""
        self._ended_at: float | None = None  # when the attempt first looked over (exit file or SLURM)
        self._nodes: list[str] | None = None

    @property
    def exit_file(self) -> Path:
        return self.prefix.with_name(self.prefix.name + ".exit")

    @property
    def nodes(self) -> list[str]:
        """The job's nodes once it has started (written by the script, or from squeue); until then
        the slot's nominal nodes."""
        if self._nodes is None:
            nodes_file = self.prefix.with_name(self.prefix.name + ".nodes")
            try:
                found = nodes_file.read_text().split()
            except OSError:
                found = []
            if not found:
                info = self.backend.job_info(self.job_id)
                if info and info["state"] not in ("PENDING", "") and info["nodes"]:
                    try:
                        found = expand_hostlist(info["nodes"])
                    except HostlistError:
                        found = []
            if found:
                self._nodes = found
        return list(self._nodes) if self._nodes else list(self.slot.nodes)

    def started(self) -> bool:
        """The job's script has run on its node (it wrote the nodes file)."""
        try:
            return self.prefix.with_name(self.prefix.name + ".nodes").stat().st_size > 0
        except OSError:
            return False

    def _read_exit_file(self) -> int | None:
        try:
            text = self.exit_file.read_text().strip()
        except OSError:
            return None
        return int(text) if re.fullmatch(r"-?\d+", text) else None

    def _waited_too_long(self) -> bool:
        """False for `exit_file_grace_s` after the first call (per attempt), then True."""
        now = time.monotonic()
        if self._ended_at is None:
            self._ended_at = now
        return now - self._ended_at >= self.backend.exit_file_grace_s

    def _done(self, rc: int, reason: str = "") -> int:
        self._returncode, self._reason = rc, reason
        self.backend.forget(self)
        return rc

    def poll(self) -> int | None:
        if self._returncode is not None:
            return self._returncode
        rc = self._read_exit_file()
        if rc == 0:
            return self._done(0)
        info = self.backend.job_info(self.job_id)
        state, reason = (info["state"], info["reason"]) if info else ("", "")
        if rc is not None:
            # The trial program failed. Why, SLURM knows once the job has ended (a job cancelled or
            # timed out is COMPLETING while its processes are killed): wait for that, for a while.
            if state in ACTIVE_STATES and not self._waited_too_long():
                return None
            return self._done(rc, describe_state(state, reason) if state in FAILURE_REASONS else "")
        if info is None or state in ACTIVE_STATES:  # running, or squeue did not answer: keep waiting
            return None
        if state in FAILURE_REASONS:
            status = CANCELLED_STATUS if state == "CANCELLED" else 1
            return self._done(status, describe_state(state, reason))
        # COMPLETED, FAILED or unknown to squeue: the exit file says how it went; give a shared
        # filesystem a moment to show it.
        if not self._waited_too_long():
            return None
        final = (self.backend.final_state(self.job_id, self.spec.trial_id) if state in ("", "UNKNOWN") else info) or {}
        final_state = final.get("state", "")
        if final_state == "COMPLETED":
            return self._done(0)
        if final_state in FAILURE_REASONS:
            status = CANCELLED_STATUS if final_state == "CANCELLED" else 1
            return self._done(status, describe_state(final_state, final.get("reason", "")))
        if final_state:
            return self._done(1, describe_state(final_state, final.get("reason", "")) + " (no exit status written)")
        return self._done(1, f"SLURM job {self.job_id} vanished without an exit status")

    def cancel(self) -> None:
        """Over at once for poll(); the job's scancel is the backend's, shared with the attempts
        cancelled right after this one (`SlurmBackend.cancel_soon`)."""
        if self._returncode is not None or self.poll() is not None:
            return
        self.backend.cancel_soon(self.job_id)
        self._done(CANCELLED_STATUS, "cancelled by the runner (scancel)")

    def describe_failure(self) -> str:
        if self._returncode in (None, 0):
            return ""
        return f"{self._reason or f'exit status {self._returncode}'} [SLURM job {self.job_id}]"

    def lost_node(self) -> str | None:
        """After SLURM ended the job for a node failure: the node of the job that it reports down."""
        # describe_state may add squeue's reason after it: "node failure (NodeDown)".
        if not self._reason.startswith(FAILURE_REASONS["NODE_FAIL"]):
            return None
        down = failed_nodes(self.nodes)
        return down[0] if down else None


# ---- the backend --------------------------------------------------------------------------------------


class SlurmBackend(Backend):
    """Trials as SLURM batch jobs; see the module docstring."""

    name = "slurm"
    options_class = SlurmOptions
    options: SlurmOptions

    def __init__(self, run_dir: Path, **options: Any) -> None:
        super().__init__(run_dir, **options)
        opts = self.options
        self.partition = opts.partition
        self.account = opts.account
        self.nodes_per_slot = opts.nodes_per_slot
        self.gpus_per_node = opts.gpus_per_node
        self.time_limit = opts.time_limit
        self.max_slots = self.requested_slots
        self.exclusive = opts.exclusive
        if self.gpus_per_node > 0:
            self.devices_per_node = self.gpus_per_node
        else:
            self.devices_per_node = max(1, self.devices_per_slot // self.nodes_per_slot)
        self.start_wait_s = opts.start_wait_s
        self.squeue_interval_s = opts.squeue_interval_s
        self.exit_file_grace_s = opts.exit_file_grace_s
        self.shutdown_wait_s = opts.shutdown_wait_s
        self.probe = opts.probe
        self.probe_timeout_s = opts.probe_timeout_s
        self.extra_sbatch_args = opts.extra_sbatch_args
        self.launch_workers = opts.launch_workers
        self.launcher = Launcher.from_options(self.run_dir, opts)
        self.placement = Placement(partition=self.partition, account=self.account, reservation=opts.reservation,
                                   qos=opts.qos, constraint=opts.constraint, extra=self.extra_sbatch_args)
        self._nodes: list[dict[str, Any]] | None = None
        self._partition_name: str | None = None
        self._slots: list[Slot] | None = None
        self._tag: str | None = None
        self._live: dict[str, SlurmHandle] = {}  # job id -> handle of every attempt not known to be over
        self._cache: dict[str, dict[str, str]] = {}
        self._cache_at = 0.0
        self._watch = FileWatch(every_s=self.squeue_interval_s)
        self._probe_facts: dict[str, Any] | None = None
        self._placement_notes: dict[str, Any] = {}
        self._excluded: list[str] = []  # nodes no job of the run may land on any more (exclude_node)
        self._lost: set[int] = set()  # slots given up for them
        self._cancel_lock = threading.Lock()
        self._to_cancel: set[str] = set()  # job ids of cancelled attempts whose scancel is still to come
        self._cancel_timer: threading.Timer | None = None  # the latest one (it issues that scancel)

    # ---- the partition ----
    def partition_nodes(self) -> list[dict[str, Any]]:
        """Nodes of the partition (sinfo), each with `usable` (up, inside the reservation, with the
        features and GPUs asked for: able to take this run's jobs); see placement.py."""
        if self._nodes is None:
            self._partition_name, self._nodes, self._placement_notes = usable_nodes(self.placement, self.gpus_per_node)
        return self._nodes

    def slots(self) -> list[Slot]:
        if self._slots is None:
            usable = [n["name"] for n in self.partition_nodes() if n["usable"]]
            count = len(usable) // self.nodes_per_slot
            if self.max_slots:
                count = min(count, self.max_slots) if self.exclusive else self.max_slots
            if count < 1 or not usable:
                where = f" in reservation {self.placement.reservation!r}" if self.placement.reservation else ""
                if self.placement.constraint:
                    where += f" with features {self.placement.constraint!r}"
                raise SlurmError(f"partition {self._partition_name!r} has {len(usable)} usable node(s){where}"
                                 f"{f' with {self.gpus_per_node} GPUs' if self.gpus_per_node else ''}; "
                                 f"a slot needs {self.nodes_per_slot}")
            # Nominal nodes: which node a job lands on is the scheduler's choice (see TrialHandle.nodes).
            self._slots = [
                Slot(index=i, nodes=self._spread(usable, i),
                     devices_per_node=self.devices_per_node,
                     device_type="cuda" if self.gpus_per_node > 0 else "cpu")
                for i in range(count)
            ]
        return list(self._slots)

    def known_hosts(self) -> list[str]:
        return sorted({n["name"] for n in self.partition_nodes()})

    # ---- names ----
    @property
    def tag(self) -> str:
        """8 hex characters naming this run's jobs: from run.json's run_id, else the run directory."""
        if self._tag is None:
            run_id = ""
            try:
                run_id = str(json.loads((self.run_dir / "run.json").read_text()).get("run_id") or "")
            except (OSError, ValueError, AttributeError):
                pass
            if not re.fullmatch(r"[0-9A-Za-z]{8,}", run_id):
                # No run.json yet (the controller writes it after asking for slots and facts): name
                # by the directory, and do not keep that name for the jobs of the run.
                return hashlib.sha256(str(self.run_dir.resolve()).encode()).hexdigest()[:8]
            self._tag = run_id[:8]
        return self._tag

    def job_name(self, trial_id: str) -> str:
        return f"{JOB_PREFIX}.{self.tag}.{trial_id}"

    def batch_script(self, spec: LaunchSpec, slot: Slot) -> str:
        prefix = spec.trial_dir / f"slurm-{spec.attempt}"
        return render_batch_script(
            job_name=self.job_name(spec.trial_id), trial_id=spec.trial_id, attempt=spec.attempt,
            argv=job_argv(spec.argv, self.run_dir), stdout=job_path(spec.stdout, self.run_dir),
            stderr=job_path(spec.stderr, self.run_dir), files_prefix=job_path(prefix, self.run_dir),
            nodes=len(slot.nodes), devices_per_node=slot.devices_per_node,
            gpus_per_node=self.gpus_per_node, partition=self.partition, account=self.account,
            reservation=self.placement.reservation, qos=self.placement.qos, constraint=self.placement.constraint,
            time_limit=self.time_limit, exclusive=self.exclusive, extra_sbatch_args=self.extra_sbatch_args,
            prologue=self.launcher.prologue, wrap=self.launcher.wrap, rdzv_iface=self.launcher.rdzv_iface)

    # ---- launching ----
    def launch(self, spec: LaunchSpec, slot: Slot) -> SlurmHandle:
        handle = self.submit(spec, slot)
        self.adopt(handle)
        return handle

    def submit(self, spec: LaunchSpec, slot: Slot) -> SlurmHandle:
        """The batch script written and sbatch'ed (up to 3 tries of a minute each: from a launch
        thread, while the controller's loop goes on), then the start wait if there is one. It tracks
        nothing (`adopt` does, on the loop); only a start wait refreshes the squeue cache (job_info),
        which the loop's polls share."""
        spec.trial_dir.mkdir(parents=True, exist_ok=True)
        for path in (spec.stdout, spec.stderr):
            path.parent.mkdir(parents=True, exist_ok=True)
        prefix = spec.trial_dir / f"slurm-{spec.attempt}"
        for suffix in (".exit", ".nodes", ".jobid"):  # left by an earlier controller's try of this attempt
            prefix.with_name(prefix.name + suffix).unlink(missing_ok=True)
        script = prefix.with_name(prefix.name + ".sh")
        script.write_text(self.batch_script(spec, slot))
        env = slurm_env({**spec.env, "AIPERF_PYTHON": sys.executable, **self.launcher.env()})
        run_dir = Path(os.path.abspath(self.run_dir))
        # sbatch runs in the run directory: the script's path relative to it (a relative --out
        # would otherwise name the script twice over).
        out = run_slurm(["sbatch", "--parsable", "--export=ALL", f"--chdir={run_dir}",
                         *exclude_args(self.extra_sbatch_args, list(self._excluded)), job_path(script, self.run_dir)],
                        env=env, cwd=run_dir, tries=3)
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch printed no job id: {out.strip()!r}")
        prefix.with_name(prefix.name + ".jobid").write_text(job_id + "\n")
        handle = SlurmHandle(self, spec, self._nominal(slot), job_id, prefix)
        self._wait_started(handle)
        return handle

    def adopt(self, handle: TrialHandle) -> None:
        assert isinstance(handle, SlurmHandle)
        self.track(handle)

    def exclude_node(self, node: str, free: Collection[int]) -> set[int] | None:
        """Later jobs get `--exclude` with the node; the slots the nodes left cannot hold (exclusive
        jobs: one per `nodes_per_slot` of them; shared nodes: all, once a job no longer fits) are
        lost, free ones first. A job submitted before may still land there (and fail the same way)."""
        if node in self._excluded:
            return set()
        self._excluded.append(node)
        left = sum(1 for n in self.partition_nodes() if n["usable"] and n["name"] not in self._excluded)
        active = [s.index for s in self.slots() if s.index not in self._lost]
        room = left // self.nodes_per_slot if self.exclusive else (len(active) if left >= self.nodes_per_slot else 0)
        lost = set(sorted(active, key=lambda i: (i not in free, -i))[:max(0, len(active) - room)])
        self._lost |= lost
        return lost

    def _nominal(self, slot: Slot) -> Slot:
        """The slot with nominal nodes the run still uses: a slot kept after one of its nodes was
        excluded has its jobs placed elsewhere (`--exclude`), so it does not name that node."""
        if not set(slot.nodes) & set(self._excluded):
            return slot
        usable = [n["name"] for n in self.partition_nodes() if n["usable"] and n["name"] not in self._excluded]
        if len(usable) < self.nodes_per_slot:
            return slot
        active = [s.index for s in self.slots() if s.index not in self._lost]
        return replace(slot, nodes=self._spread(usable, active.index(slot.index) if slot.index in active else slot.index))

    def _spread(self, usable: list[str], position: int) -> tuple[str, ...]:
        """The nominal nodes of the slot at `position`: the next `nodes_per_slot` of `usable`, round."""
        return tuple(usable[(position * self.nodes_per_slot + k) % len(usable)] for k in range(self.nodes_per_slot))

    def _wait_started(self, handle: SlurmHandle) -> None:
        """Give the scheduler a moment to start the job, so that `handle.nodes` are the real ones:
        watch for the nodes file the job writes when it starts (no squeue call of its own). Not when
        jobs of this run already wait in the queue: then the cluster is busy."""
        if self.start_wait_s <= 0:
            return
        # Pending by the last squeue, and still not started by its nodes file (the cache may be older).
        others_pending = any(h is not handle and not h.started() and (self._cache.get(j) or {}).get("state") == "PENDING"
                             for j, h in list(self._live.items()))
        if others_pending:
            return
        deadline = time.monotonic() + self.start_wait_s
        while time.monotonic() < deadline:
            if handle.started():
                return
            info = self.job_info(handle.job_id)  # squeue at most once per squeue_interval_s
            if info is not None and info["state"] not in ACTIVE_STATES:
                return  # over already (a running job writes the file in a moment)
            time.sleep(0.2)

    # ---- the queue ----
    def job_info(self, job_id: str, fresh: bool = False) -> dict[str, str] | None:
        """{state, reason, nodes, name} of a job of this backend, from one squeue call for all of them
        made at most once per `squeue_interval_s` (or now, with `fresh`); state "" when squeue no
        longer knows it; None when squeue fails, or has not been asked since the job was submitted."""
        now = time.monotonic()
        if fresh or now - self._cache_at >= self.squeue_interval_s:
            ids = sorted(set(self._live) | {job_id}, key=int)
            try:
                text = run_slurm(["squeue", "-h", "--states=all", "-o", "%i|%T|%r|%N|%j", "-j", ",".join(ids)])
            except SlurmError as exc:
                if "Invalid job id" not in str(exc):
                    self._cache_at = now  # a failing squeue is not asked again at once either
                    return None
                text = ""  # every one of them has left squeue's memory
            known = parse_squeue(text)
            self._cache = {i: known.get(i, {"state": "", "reason": "", "nodes": "", "name": ""}) for i in ids}
            self._cache_at = now
        return self._cache.get(job_id)

    def final_state(self, job_id: str, trial_id: str) -> dict[str, str] | None:
        """The end state of a job squeue has forgotten: sacct when accounting is on, else the job
        completion log when it is a text file this process can read."""
        name = self.job_name(trial_id)
        try:
            # By id and name: a job id can come back (a cluster whose state was reset, several
            # clusters on one database), and then sacct lists every job that had it.
            out = run_slurm(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobName,State"])
            for line in out.splitlines():
                job_name, _, state = line.partition("|")
                if job_name == name and state.split():
                    return {"state": state.split()[0], "reason": ""}
        except SlurmError:
            pass
        try:
            config = run_slurm(["scontrol", "show", "config"])
        except SlurmError:
            return None
        settings = dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", config, re.M))
        if settings.get("JobCompType") != "jobcomp/filetxt" or not settings.get("JobCompLoc"):
            return None
        try:
            with open(settings["JobCompLoc"], "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - (4 << 20)))
                tail = fh.read().decode(errors="replace")
        except OSError:
            return None
        for line in reversed(tail.splitlines()):
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            if fields.get("JobId") == job_id and fields.get("Name") == name:
                return {"state": fields.get("JobState", ""), "reason": ""}
        return None

    def track(self, handle: SlurmHandle) -> None:
        """A submitted attempt: polled through squeue, its trial log and exit file watched."""
        self._live[handle.job_id] = handle
        self._watch.add(handle, [handle.spec.trial_dir / EVENTS, handle.exit_file])

    def forget(self, handle: SlurmHandle) -> None:
        self._live.pop(handle.job_id, None)
        self._watch.discard(handle)

    def wait_changed(self, timeout: float) -> set[TrialHandle] | None:
        return self._watch.wait(timeout)

    def run_jobs(self) -> dict[str, dict[str, str]]:
        """Jobs of this run (by name) that still are in the queue: {job id: info}."""
        user = str(os.getuid())
        text = run_slurm(["squeue", "-h", "-u", user, "-o", "%i|%T|%r|%N|%j"], tries=2)
        prefix = f"{JOB_PREFIX}.{self.tag}."
        return {j: info for j, info in parse_squeue(text).items()
                if info["name"].startswith(prefix) and info["state"] in ACTIVE_STATES}

    def cancel_soon(self, job_id: str) -> None:
        """scancel this job within CANCEL_BATCH_S, in one call with every job cancelled meanwhile."""
        with self._cancel_lock:
            first = not self._to_cancel
            self._to_cancel.add(job_id)
            if first:
                self._cancel_timer = threading.Timer(CANCEL_BATCH_S, self._flush_cancels)
                self._cancel_timer.daemon = True
                self._cancel_timer.start()

    def _flush_cancels(self) -> None:
        with self._cancel_lock:
            ids, self._to_cancel = self._to_cancel, set()
        scancel(ids)  # a scancel that fails leaves the jobs to the shutdown's

    def _take_cancels(self) -> set[str]:
        """The job ids still to be cancelled, their timer stopped (or, already firing, waited for)."""
        with self._cancel_lock:
            ids, self._to_cancel = self._to_cancel, set()
            timer = self._cancel_timer
        if timer is not None:
            timer.cancel()
            timer.join(timeout=self.shutdown_wait_s)
        return ids

    def shutdown(self) -> None:
        """Cancel every job of the run (those this backend started, those cancelled a moment ago,
        and any other carrying the run's name prefix, e.g. left by a killed controller) with one
        scancel, and wait for all of them to leave the queue, `shutdown_wait_s` at most."""
        ids = self._take_cancels() | set(self._live)
        try:
            # Those being killed already (COMPLETING) need no second scancel, only the wait.
            ids |= {j for j, info in self.run_jobs().items() if info["state"] != "COMPLETING"}
        except SlurmError:
            pass
        scancel(ids)
        for handle in list(self._live.values()):
            handle._done(CANCELLED_STATUS, "cancelled by the runner (scancel) at shutdown")
        self._wait_gone(time.monotonic() + self.shutdown_wait_s)
        self._watch.close()

    def _wait_gone(self, deadline: float) -> None:
        """Until no job of the run is in the queue, or the deadline."""
        recancel_at = time.monotonic() + RECANCEL_AFTER_S
        while time.monotonic() < deadline:
            try:
                left = self.run_jobs()
            except SlurmError:
                return
            if not left:
                return
            if time.monotonic() >= recancel_at:
                scancel(j for j, info in left.items() if info["state"] != "COMPLETING")
                recancel_at = time.monotonic() + RECANCEL_AFTER_S
            time.sleep(1.0)  # a cancelled job takes up to KillWait to leave: no need to ask faster

    def reap_orphan(self, trial_dir: Path) -> str | None:
        """Cancel the jobs a killed controller left for this trial (their ids are in slurm-*.jobid)."""
        ids = []
        for path in sorted(Path(trial_dir).glob("slurm-*.jobid")):
            job_id = path.read_text().strip()
            exit_file = path.with_suffix(".exit")
            if job_id.isdigit() and not exit_file.exists():
                info = self.job_info(job_id, fresh=True)
                if info is not None and info["state"] in ACTIVE_STATES:
                    ids.append(job_id)
        if not ids:
            return None
        scancel(ids)
        return f"cancelled SLURM job(s) {', '.join(ids)} left by the previous controller"

    # ---- facts ----
    def system_facts(self) -> dict[str, Any]:
        """Nodes, CPUs, memory and GRES from sinfo (no node names), the SLURM version, and what a
        probe job found on a compute node (CPU model, torch, accelerators)."""
        nodes = self.partition_nodes()
        usable = [n for n in nodes if n["usable"]]
        slots = self.slots()
        used = usable[: min(len(usable), len(slots) * self.nodes_per_slot)]
        facts: dict[str, Any] = {
            "nodes": len(used),
            "cpu_cores": sum(n["cpus"] for n in used),
            "memory_bytes": sum(n["memory_mb"] for n in used) * 2**20 or None,
            "slurm": {
                "version": slurm_version(),
                "partition": self._partition_name,
                "partition_nodes": len(nodes),
                "usable_nodes": len(usable),
                "nodes_per_slot": self.nodes_per_slot,
                "gpus_per_node": self.gpus_per_node,
                "exclusive": self.exclusive,
                "time_limit": self.time_limit,
                "cpus_per_node": sorted({n["cpus"] for n in used}),
                "memory_mb_per_node": sorted({n["memory_mb"] for n in used}),
                "gres": sorted({n["gres"] for n in used if n["gres"]}),
            },
        }
        facts["slurm"].update({**self.placement.facts(), **self._placement_notes, "launcher": self.launcher.facts()})
        apply_probe(facts, self.probe_node() if self.probe else {}, self.gpus_per_node, len(used))
        return facts

    def probe_node(self) -> dict[str, Any]:
        """What a one-task job where the run's jobs go finds there (placement.run_probe). A probe
        that fails raises SlurmError: the run stops before it starts, with the reason, rather than
        describe the controller's machine and fail its plausibility checks hours later."""
        if self._probe_facts is None:
            args = [*self.placement.args(), *(["--exclusive"] if self.exclusive else []),
                    *memory_args(self.exclusive, self.extra_sbatch_args)]
            self._probe_facts = run_probe(args, f"{JOB_PREFIX}.{self.tag}.probe", self.gpus_per_node, sys.executable,
                                          self.probe_timeout_s)
        return self._probe_facts
