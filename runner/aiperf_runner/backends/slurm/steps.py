"""The `slurm-steps` backend: the controller runs inside one SLURM allocation (an `sbatch` job, e.g.
scripts/slurm-steps.sbatch, or `salloc`), and every attempt of every trial is a job step of it,
`srun --exact` on its slot's nodes.

Slots come from the allocation's node list (`SLURM_JOB_NODELIST`): one per `nodes_per_slot` nodes;
`slots` beyond that (with one node per slot) share the nodes, their CPUs split between them. No
trial waits in the queue: the allocation is held for the whole run, as MLPerf HPC and HPL runs are.
The price is the one-job-per-trial backend's isolation (see docs/slurm.md): the run ends with the
allocation. A node that fails takes only its steps (the allocation is `--no-kill`): a step that
ended without its result on a node SLURM reports down loses that node's slots (`StepHandle.lost_node`).

Each step is an `srun` process of the controller (its exit status is the trial's; its output goes
to the trial's stdout.log and stderr.log). One node per slot: the step runs the trial program
(`--nproc K`). Several: one `torchrun` per node, meeting at a c10d rendezvous on the slot's first
node (its NodeAddr, looked up here, so nothing in the step needs the SLURM client; with
`--rdzv-iface IFACE`, that interface's address there, looked up once per node by a one-task step
running util/ifaddr.py on it). `--prologue`
and `--wrap` work as with the `slurm` backend (launcher.py); the step's environment has
AIPERF_TRIAL, AIPERF_ATTEMPT and AIPERF_NODES. Options (`SlurmStepsOptions`, options.py):
`nodes_per_slot`, `gpus_per_node`, `slots`, `devices_per_slot`, `probe`, `probe_timeout_s`,
`prologue`, `wrap`, `trial_python`, `rdzv_iface`, `stop_wait_s`, `warm_start` (warm.py: a zygote step per node
forks the attempts of one-node slots instead of a step each).

A step's end is its srun's exit; its log lines are found by stat with back-off, and at once by
inotify when the step runs on the controller's node (`wait_changed`, filewatch.py). Cancelling an
attempt signals its srun and returns; `shutdown` cancels every step of the run with one `scancel`
and waits for all the sruns together (`stop_wait_s`, then SIGKILL).

Each step gets `--mem=0`: all of the allocation's memory on its nodes, without taking it from the
steps that share them (a step would otherwise ask for what the allocation's environment says, e.g.
SLURM_MEM_PER_NODE, and steps sharing a node would wait for each other).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import zlib
from collections.abc import Collection
from pathlib import Path
from typing import IO, Any

from aiperf_runner.backends.base import Backend, LaunchSpec, Slot, TrialHandle
from aiperf_runner.backends.filewatch import FileWatch
from aiperf_runner.spec.runio import EVENTS
from aiperf_runner.util.hostlist import HostlistError, expand_hostlist

from .backend import JOB_PREFIX
from .commands import SlurmError, run_slurm, scancel, slurm_version
from .handle import StepHandle
from .launcher import Launcher
from .options import SlurmStepsOptions
from .placement import apply_probe, run_probe
from .script import RDZV_PORT_BASE, RDZV_PORTS, drop_option, job_argv
from .warm import STOP_GRACE_S, WarmHandle, WarmStarts, trial_module


def cpus_per_node(spec: str, nodes: int) -> list[int]:
    """SLURM_JOB_CPUS_PER_NODE ('2(x3),1') -> one count per node ([2, 2, 2, 1])."""
    out: list[int] = []
    for item in filter(None, spec.split(",")):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if not m:
            raise SlurmError(f"cannot read SLURM_JOB_CPUS_PER_NODE {spec!r}")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    if len(out) != nodes:
        raise SlurmError(f"SLURM_JOB_CPUS_PER_NODE {spec!r} does not match the allocation's {nodes} node(s)")
    return out


class SlurmStepsBackend(Backend):
    """Trials as job steps of the allocation the controller runs in; see the module docstring."""

    name = "slurm-steps"
    options_class = SlurmStepsOptions
    options: SlurmStepsOptions

    def __init__(self, run_dir: Path, **options: Any) -> None:
        super().__init__(run_dir, **options)
        self.job_id = os.environ.get("SLURM_JOB_ID", "")
        nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
        if not self.job_id or not nodelist:
            raise SlurmError("the slurm-steps backend runs inside a SLURM allocation (sbatch or salloc): "
                             "SLURM_JOB_ID and SLURM_JOB_NODELIST are not set")
        try:
            self.nodes = expand_hostlist(nodelist)
        except HostlistError as exc:
            raise SlurmError(f"cannot read SLURM_JOB_NODELIST: {exc}") from None
        self.cpus = cpus_per_node(os.environ.get("SLURM_JOB_CPUS_PER_NODE", ""), len(self.nodes))
        self.nodes_per_slot = self.options.nodes_per_slot
        self.gpus_per_node = self.options.gpus_per_node
        self.devices_per_node = self.gpus_per_node or max(1, self.devices_per_slot // self.nodes_per_slot)
        self.probe = self.options.probe
        self.probe_timeout_s = self.options.probe_timeout_s
        self.stop_wait_s = self.options.stop_wait_s
        self.launcher = Launcher.from_options(self.run_dir, self.options)
        self._slots: list[Slot] | None = None
        self._addr: dict[str, str] = {}
        self._live: dict[str, StepHandle | WarmHandle] = {}
        self._watch = FileWatch(ended=lambda h: h.poll() is not None)
        self._lost: set[int] = set()  # slots on nodes the run stopped using (exclude_node)
        self.warm = WarmStarts(self.run_dir.resolve(), self.job_id, self.run_dir / "local") \
            if self.options.warm_start else None

    @property
    def zygote_note(self) -> str:
        """Why some attempts start cold when warm starts were asked for (printed by the run)."""
        return "; ".join(self.warm.notes) if self.warm is not None else ""

    def prepare(self, trial_argv: tuple[str, ...]) -> None:
        """With `warm_start`: a zygote step on each node of the one-node slots, ready before the clock."""
        if self.warm is None or self.warm.zygotes:
            return
        module = trial_module(trial_argv)
        if module is None or self.nodes_per_slot != 1:
            self.warm.notes.append("warm starts need one-node slots and a `python -m MODULE` trial program")
            return
        nodes = list(dict.fromkeys(s.nodes[0] for s in self.slots()))
        self.warm.start(nodes, ["srun"], self._prefix(), self.launcher.trial_python or sys.executable, module,
                        {**os.environ, **self.launcher.env()}, self.gpus_per_node)

    def slots(self) -> list[Slot]:
        if self._slots is None:
            groups = [tuple(self.nodes[i:i + self.nodes_per_slot])
                      for i in range(0, len(self.nodes) - self.nodes_per_slot + 1, self.nodes_per_slot)]
            if not groups:
                raise SlurmError(f"the allocation has {len(self.nodes)} node(s); a slot needs {self.nodes_per_slot}")
            count = self.requested_slots or len(groups)
            if count > len(groups) and self.nodes_per_slot > 1:
                raise SlurmError(f"{count} slots of {self.nodes_per_slot} nodes need {count * self.nodes_per_slot} "
                                 f"nodes; the allocation has {len(self.nodes)}")
            self._slots = [Slot(index=i, nodes=groups[i % len(groups)], devices_per_node=self.devices_per_node,
                                device_type="cuda" if self.gpus_per_node else "cpu") for i in range(count)]
        return list(self._slots)

    def exclude_node(self, node: str, free: Collection[int]) -> set[int] | None:
        """The slots on `node` are lost (the allocation holds no other node to put them on)."""
        lost = {s.index for s in self.slots() if node in s.nodes} - self._lost
        self._lost |= lost
        return lost

    def _cpus_per_task(self, slot: Slot) -> int:
        sharing = sum(s.nodes == slot.nodes for s in self.slots())
        return max(1, min(self.cpus[self.nodes.index(n)] for n in slot.nodes) // sharing)

    def _node_addr(self, node: str) -> str:
        """NodeAddr of `node` (the rendezvous of a multi-node slot), else its name."""
        if node not in self._addr:
            self._addr[node] = node
            with contextlib.suppress(SlurmError):
                found = re.search(r"\bNodeAddr=(\S+)", run_slurm(["scontrol", "show", "node", node, "-o"]))
                if found:
                    self._addr[node] = found.group(1)
        return self._addr[node]

    def rdzv_addr(self, node: str) -> str:
        """Where a slot whose first node is `node` meets: its `--rdzv-iface` address there, else
        its NodeAddr. SlurmError (the attempt's launch failure) when the interface has no address."""
        iface = self.launcher.rdzv_iface
        if not iface:
            return self._node_addr(node)
        key = f"{node}%{iface}"
        if key not in self._addr:
            # --overlap: the node's CPUs may all be held by other slots' steps.
            out = run_slurm(["srun", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node}",
                             "--job-name=aiperf-rdzv-iface", sys.executable, "-m", "aiperf_runner.util.ifaddr", iface],
                            timeout=120)
            self._addr[key] = out.strip().splitlines()[-1]
        return self._addr[key]

    def step_argv(self, spec: LaunchSpec, slot: Slot) -> list[str]:
        """The srun command of one attempt (run in the run directory)."""
        k = len(slot.nodes)
        python = self.launcher.trial_python or sys.executable
        argv = job_argv(spec.argv, self.run_dir)
        srun = ["srun", "--exact", f"--nodes={k}", f"--ntasks={k}", "--ntasks-per-node=1",
                f"--cpus-per-task={self._cpus_per_task(slot)}", f"--nodelist={','.join(slot.nodes)}",
                f"--job-name={self.step_name(spec)}", "--kill-on-bad-exit=1", "--mem=0"]
        if self.gpus_per_node:
            srun.append(f"--gres=gpu:{self.gpus_per_node}")
        prefix = self._prefix()
        if argv[0] == sys.executable:
            argv = [python, *argv[1:]]
        if k == 1 or len(argv) < 3 or argv[1] != "-m":
            return [*srun, *prefix, *argv]
        port = RDZV_PORT_BASE + zlib.crc32(f"{spec.trial_id}.{spec.attempt}".encode()) % RDZV_PORTS
        return [*srun, *prefix, python, "-m", "torch.distributed.run", f"--nnodes={k}",
                f"--nproc-per-node={slot.devices_per_node}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={self.rdzv_addr(slot.nodes[0])}:{port}",
                f"--rdzv-id={self.job_id}.{spec.trial_id}.{spec.attempt}", *drop_option(argv[1:], "--nproc")]

    def _prefix(self) -> list[str]:
        """What every step runs its program under: the site's prologue, sourced, and its wrapper."""
        prefix = list(self.launcher.wrap)
        if self.launcher.prologue:
            prefix = ["bash", "-c", f'source ./{self.launcher.prologue} && exec "$@"', "aiperf-prologue", *prefix]
        return prefix

    def _share(self, slot: Slot) -> tuple[int, int]:
        """The slot's share of its node's cores: (its place among the slots on the node, their number)."""
        sharing = [s.index for s in self.slots() if s.nodes == slot.nodes]
        return sharing.index(slot.index), len(sharing)

    def step_name(self, spec: LaunchSpec) -> str:
        return f"{JOB_PREFIX}.{self.job_id}.{spec.trial_id}.{spec.attempt}"

    def launch(self, spec: LaunchSpec, slot: Slot) -> StepHandle | WarmHandle:
        spec.trial_dir.mkdir(parents=True, exist_ok=True)
        own = {**spec.env, "AIPERF_PYTHON": sys.executable, **self.launcher.env(), "AIPERF_TRIAL": spec.trial_id,
               "AIPERF_ATTEMPT": str(spec.attempt), "AIPERF_NODES": ",".join(slot.nodes)}
        warm = self._launch_warm(spec, slot, own) if self.warm is not None else None
        if warm is not None:
            return warm
        argv = self.step_argv(spec, slot)
        env = {**os.environ, **own}
        (spec.trial_dir / f"slurm-{spec.attempt}.step").write_text(f"{self.job_id} {self.step_name(spec)}\n")
        out: IO[bytes]
        with open(spec.stdout, "ab") as out, open(spec.stderr, "ab") as err:
            out.write(f"aiperf: trial {spec.trial_id} attempt {spec.attempt}: step of SLURM job {self.job_id} "
                      f"on {','.join(slot.nodes)}\n".encode())
            out.flush()
            proc = subprocess.Popen(argv, cwd=self.run_dir, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        handle = StepHandle(spec, slot, proc, self.step_name(spec), self.job_id)
        self._live[handle.name] = handle
        self._watch.add(handle, [spec.trial_dir / EVENTS])
        return handle

    def _launch_warm(self, spec: LaunchSpec, slot: Slot, env: dict[str, str]) -> WarmHandle | None:
        """The attempt forked by its node's zygote (the step's environment, `env` over it); None: start cold."""
        assert self.warm is not None
        argv = job_argv(spec.argv, self.run_dir)
        if len(slot.nodes) != 1 or slot.nodes[0] not in self.warm.zygotes or trial_module(argv) is None:
            return None  # before the banner: a cold step writes its own
        with open(spec.stdout, "ab") as out:
            out.write(f"aiperf: trial {spec.trial_id} attempt {spec.attempt}: forked by the warm-start step of "
                      f"SLURM job {self.job_id} on {slot.nodes[0]}\n".encode())
        handle = self.warm.spawn(spec, slot, argv, env, self._share(slot), self.step_name(spec))
        if handle is not None:
            self._live[handle.name] = handle
            self._watch.add(handle, [spec.trial_dir / EVENTS])
        return handle

    def wait_changed(self, timeout: float) -> set[TrialHandle] | None:
        return self._watch.wait(timeout)

    # ---- what is left of a run ----
    def _steps(self) -> dict[str, str]:
        """{step id: name} of this run's steps still in the allocation."""
        text = run_slurm(["squeue", "-h", "-s", "-j", self.job_id, "-o", "%i|%j"], tries=2)
        prefix = f"{JOB_PREFIX}.{self.job_id}."
        return {i: n for i, n in (line.split("|", 1) for line in text.split() if "|" in line) if n.startswith(prefix)}

    def reap_orphan(self, trial_dir: Path) -> str | None:
        """Cancel the steps of this trial a killed controller left running in this allocation."""
        trial = Path(trial_dir).name
        try:
            ids = [i for i, n in self._steps().items() if n.rsplit(".", 2)[-2] == trial]
        except SlurmError:
            return None
        if not ids:
            return None
        with contextlib.suppress(SlurmError):
            run_slurm(["scancel", *ids])
        return f"cancelled SLURM step(s) {', '.join(ids)} left by the previous controller"

    def shutdown(self) -> None:
        """Cancel every step of the run at once: SIGTERM to each srun still running and one scancel
        for all the run's steps in the allocation (those a killed controller left too); then wait
        for the sruns together, `stop_wait_s` at most, and SIGKILL those left."""
        running = [h for h in self._live.values() if h.proc.poll() is None]
        for handle in running:
            handle.cancel()
        zygotes = f"{JOB_PREFIX}.{self.job_id}.zygote."  # their steps end after their attempts, below
        with contextlib.suppress(SlurmError):
            scancel({i: n for i, n in self._steps().items() if not n.startswith(zygotes)})
        deadline = time.monotonic() + self.stop_wait_s
        warm_deadline = min(deadline, time.monotonic() + STOP_GRACE_S)
        killed = [h for h in running if not h.wait_exit(warm_deadline if isinstance(h, WarmHandle) else deadline)]
        if self.warm is not None:
            self.warm.close()
        if killed or self.warm is not None:  # steps may outlive a killed srun; a zygote's, its stdin closed
            with contextlib.suppress(SlurmError):
                scancel(self._steps())
        self._live.clear()
        self._watch.close()

    # ---- facts ----
    def system_facts(self) -> dict[str, Any]:
        used = sorted({n for s in self.slots() for n in s.nodes}, key=self.nodes.index)
        facts: dict[str, Any] = {
            "nodes": len(used),
            "cpu_cores": sum(self.cpus[self.nodes.index(n)] for n in used),
            "slurm": {"version": slurm_version(), "mode": "steps", "allocation_nodes": len(self.nodes),
                      "nodes_per_slot": self.nodes_per_slot, "gpus_per_node": self.gpus_per_node,
                      "cpus_per_node": sorted(set(self.cpus)), "launcher": self.launcher.facts()},
        }
        if self.probe:
            # A step on the first node (the allocation's environment makes srun a step, not a job).
            probe = run_probe(["--exact", f"--nodelist={used[0]}"], f"{JOB_PREFIX}.{self.job_id}.probe",
                              self.gpus_per_node, sys.executable, self.probe_timeout_s, env=dict(os.environ))
            apply_probe(facts, probe, self.gpus_per_node, len(used))
        return facts
