"""The controller ("master"): owns the search state, keeps every slot busy, writes the run's log.

- **Asynchronous refill**: the moment a slot's attempt ends, the slot gets the next trial (a retry
  first, else the next ready proposal); there is no generation barrier.
- **Search beside training**: a background thread (`ProposalBuffer`) asks the architecture search
  for the next candidates and keeps a few ready, so a slot never waits for the search. Results
  reach the search through the same thread, each accuracy paired with the architecture hash of the
  trial that produced it.
- **Round and budget**: round r = trial sequence number // slots; epoch budget from the preset.
- **Epochs**: the trial program appends `epoch_end` lines to `trials/<id>/events.jsonl`; the
  controller copies each new one into the main log as it appears: when the backend says the file
  changed (`wait_changed`: inotify, stat with back-off; backends/filewatch.py), or, with a backend
  that cannot tell, after looking at every running trial's file every `POLL_S`.
- **Failures**: a non-zero exit or `trial_error` -> `trial_failed` (with the trial's error or the
  tail of its stderr) and a retry, up to `max_retries`; the retried attempt resumes from the
  trial's checkpoint. Then the trial is recorded failed and the run goes on.
- **Nodes lost**: an attempt that fails because its node refused the run's staged data
  (`StageError: node NAME: ...`, data/staging.py) is retried, whatever its retries so far (once per
  node: a later refusal there, of a job placed before, is an ordinary failure), and the
  backend stops using the node (`Backend.exclude_node`): each slot lost with it is logged as
  `slot_lost` (with `node`) and never filled again. A backend that cannot do without the node
  (local), or no slot left, stops the run with the reason. So does an attempt that ended without
  its result on a node the backend reports failed (`TrialHandle.lost_node`: SLURM says it is down):
  it is retried, and the node's slots are lost.
- **Checkpoints** go when no attempt can resume from them any more (rundir/checkpoints.py): at a trial's
  end (finished, failed for good, cancelled), for every trial once the run has finished, and on
  `--resume` for the trials the log says are over.
- **Stop**: at the duration (counted from the run's original start, also across a resume), on
  SIGINT/SIGTERM, or when the search has nothing left: running attempts are cancelled
  (`trial_cancelled`), then `run_finished`.
- **Resume** (`Controller.resume`): the log is replayed (`RunState`), the writer continues the
  chain (a line cut short by the crash is dropped), processes the killed controller left are killed
  (`Backend.reap_orphan`), their uncopied epochs copied, and their attempts recorded as failed
  ("controller interrupted") and retried; the search and the hyper-parameter optimiser are rebuilt
  from the proposals and results in the log.
"""

from __future__ import annotations

import heapq
import json
import os
import shutil
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aiperf_runner import __version__
from aiperf_runner.backends.base import Backend, LaunchSpec, Slot, TrialHandle, load_backend
from aiperf_runner.client.service import Service
from aiperf_runner.data import staging as stagedata
from aiperf_runner.data.presets import epoch_budget, get_preset
from aiperf_runner.run import startup
from aiperf_runner.run.heartbeats import WitnessedLog, Witnessing, first_line_hash, token_interval
from aiperf_runner.run.launches import Launches
from aiperf_runner.run.state import INTERRUPTED, RunState, TrialState, read_run_json
from aiperf_runner.run.statekeeper import StateKeeper
from aiperf_runner.run.trialtail import TrialTail
from aiperf_runner.run.weightkeeper import WeightKeeper, keep_share
from aiperf_runner.rundir import checkpoints, privacy, recorded
from aiperf_runner.rundir.config import AUTO_PRECISION, ControllerError, RunConfig, auto_precision
from aiperf_runner.rundir.lock import lock, unlock
from aiperf_runner.rundir.timings import LAUNCHED_AT_ENV
from aiperf_runner.search.buffer import SEARCH_PROCESS_MIN_SLOTS, Candidate, ProposalBuffer, make_search, ready_target
from aiperf_runner.search.protocols import ArchitectureSearcher, HparamOptimiser
from aiperf_runner.spec import SPEC_VERSION, keys, proof
from aiperf_runner.spec import rules as spec_rules
from aiperf_runner.spec.eventlog import RESERVED, EventWriter, iter_events
from aiperf_runner.spec.presetfacts import KERNEL_SIZE
from aiperf_runner.spec.replay import Attempt
from aiperf_runner.spec.retention import WEIGHTS, RetentionAudit
from aiperf_runner.spec.runio import RunDir
from aiperf_runner.spec.scoring import ScoreAccumulator, run_flops_fn

POLL_S = 0.1
SYNC_S = 0.1  # the controller's log is fsync'ed at least this often (group commit; see spec/eventlog.py)
MIN_TICK_S = 0.02  # with a backend that reports news: the shortest loop, so that news is handled in batches
__all__ = ["Controller", "ControllerError", "RunConfig"]
STDERR_TAIL_CHARS = 2000
# A backend that refuses this many launches in a row, with none accepted in between, is broken
# (no scheduler, a bad option, an unwritable run directory): stop instead of burning the search.
LAUNCH_FAILURES_IN_A_ROW = 8
FINAL_RECEIPT_WAIT_S = 60.0  # how long the end of a witnessed run waits for its last receipt


# ---- the controller -----------------------------------------------------------------------------------


@dataclass
class Running:
    trial: TrialState
    attempt: int
    slot: Slot
    handle: TrialHandle
    nodes: list[str]  # as trial_started named them (the slot's nominal nodes when the job had not yet started)


@dataclass
class _Prepared:
    """A trial whose directory is written and whose proposal is not logged yet (the first wave's,
    made before the run's clock starts)."""

    trial: str
    candidate: Candidate
    parent: str | None
    hparams: dict[str, Any]
    source: str
    round: int
    budget: int


class Controller:
    """One run. Build it with `Controller.create(...)` or `Controller.resume(...)`, then `run()`."""

    def __init__(self, run_dir: Path, run_json: dict[str, Any], config: RunConfig, backend: Backend,
                 search: ArchitectureSearcher, hparams: HparamOptimiser, state: RunState, writer: EventWriter,
                 lock_fh: Any,
                 progress: Any = None, live_score: _LiveScore | None = None,
                 masker: privacy.Masker | None = None) -> None:
        self.run_dir = run_dir
        self.masker = masker or privacy.run_masker(run_dir)  # what the log may say of hosts and paths
        self.run_json = run_json
        self.config = config
        self.preset = get_preset(config.preset)
        self.backend = backend
        self.hparams = hparams
        self.state = state
        self.writer = writer
        self._lock_fh = lock_fh
        self.progress = progress
        self.slots = backend.slots()
        self.buffer = ProposalBuffer(search, target=ready_target(len(self.slots)), rules=config.rules,
                                     process=len(self.slots) >= SEARCH_PROCESS_MIN_SLOTS)
        self._prepared: deque[_Prepared] = deque()  # the first wave, written before the clock
        self._trials_root = (run_dir / "trials").resolve()
        self.running: dict[int, Running] = {}  # slot index -> attempt
        self.launches = Launches(backend)  # attempts whose launch is in flight (a backend whose launches block)
        self._slot_of: dict[TrialHandle, int] = {}  # running handle -> slot index
        self._free = [slot.index for slot in self.slots]  # a heap: the lowest free slot is filled first
        self._slot_by_index = {slot.index: slot for slot in self.slots}
        self._synced_at = time.monotonic()
        self.tails: dict[str, TrialTail] = {}
        self.states: StateKeeper | None = None  # a witnessed run's committed states (set with the weight keeper)
        self.witnessed_run = False  # trials store their committed states only then (trial.json keep_states)
        self._states_copied: dict[str, int] = {}  # trial -> the last epoch whose epoch_states line was copied
        self._stop_reason: str | None = None
        self.witnessing: Witnessing | None = None
        self.witnessed_log: WitnessedLog | None = None
        self.keeper: WeightKeeper | None = None  # set once run_started (or run_resumed) is logged
        self._launch_failures_in_a_row = 0
        self._lost: dict[int, dict[str, str]] = {}  # slot index -> its slot_lost fields (_lose_node)
        self._excluded: set[str] = set()  # nodes the run stopped using
        self._score = live_score or _LiveScore(run_dir, config.rules, state)

    # ---- building -----------------------------------------------------------------------------------
    @classmethod
    def create(cls, config: RunConfig, run_dir: str | Path, *, peak_overrides: dict[str, float] | None = None, progress: Any = None,
               search_factory: Callable[..., tuple[ArchitectureSearcher, HparamOptimiser]] = make_search,
               registration: dict[str, Any] | None = None, service: Service | None = None) -> Controller:
        """Start a run. `registration`: the service's record of the system (`run --system`), kept in
        run.json's `system` (`id`, `registration`); the service judges the run by its own copy.
        With `service` as well, the run is witnessed: the service issues its run id and token."""
        preset = startup.resolve_preset_defaults(config)
        run_dir = Path(run_dir)
        if (run_dir / "run.json").exists() or (run_dir / "events.jsonl").exists():
            raise ControllerError(f"{run_dir} already holds a run: continue it with --resume {run_dir}, "
                                  "or choose another --out")
        dataset = preset.dataset(config.data, config.data_manifest)
        startup.check_pixels(config, dataset)
        (run_dir / "trials").mkdir(parents=True, exist_ok=True)
        lock_fh = lock(run_dir)
        try:
            backend, slots = startup.open_backend(config, run_dir)
            if config.precision == AUTO_PRECISION:  # before run.json, the token and the trials read it
                config.precision = auto_precision(config.preset, slots[0].device_type)
            facts, host = startup.system_facts(backend, slots)
            if registration is not None:
                config.system_id = str(registration["id"])
            peaks, peak_sources = startup.declared_peaks(config, slots, {**host, **facts}, registration, peak_overrides)
            config.slots = len(slots)
            masker, public_config = privacy.start_run(run_dir, asdict(config), backend.known_hosts())
            data_source = startup.record_data_source(config, preset, run_dir, masker)
            system = startup.public_system(config, slots, host, facts, registration, masker)
            token = startup.ask_run_token(config, registration, service)
            if token is not None:
                recorded.record_witness(run_dir, token)  # for the site's own verify; the service has its own
            run_json = startup.make_run_json(config, token, public_config, system, peaks, peak_sources, dataset, data_source)
            _write_json(run_dir / "run.json", run_json)
            search, hparams = search_factory(preset, dataset, config.seed)
            writer = EventWriter(run_dir / "events.jsonl", durability="batch")
            self = cls(run_dir, run_json, config, backend, search, hparams, RunState(), writer, lock_fh, progress,
                       masker=masker)
        except BaseException:
            unlock(lock_fh, run_dir)
            raise
        self._start_run(dataset, token, service)
        return self

    def _start_run(self, dataset: dict[str, Any], token: dict[str, Any] | None, service: Service | None) -> None:
        """From a written run.json to a started run: the searches, the backend's start-up work and
        the first wave before the clock, then `run_started`, witnessing and the weight keeper."""
        config = self.config
        self._start_proposers()
        self._prepare_backend()
        self.witnessed_run = token is not None
        # The whole first wave is made before the clock starts: its candidates, their
        # hyper-parameters and their trial directories, so that after run_started only the log
        # lines and the launches remain; and the buffer is full again before the clock, so the
        # search does not compete with those launches.
        self.buffer.wait_ready(len(self.slots) + self.buffer.target, timeout=max(120.0, 0.1 * len(self.slots)))
        self._prepare_first_wave()
        witnessed = {"token": token["token"]} if token else {}
        self._log("run_started", run_id=self.run_json["run_id"], preset=config.preset, rules=config.rules,
                  slots=len(self.slots), runner_version=__version__, spec_version=SPEC_VERSION,
                  rules_version=self.run_json["rules_version"], precision=config.precision, devices_per_slot=config.devices_per_slot, dataset=dataset,
                  **witnessed)
        if token is not None and service is not None:
            self._start_witnessing(Witnessing(service, str(self.run_json["run_id"]),
                                              float(token["heartbeat_interval_s"]), keys.load_private_key(),
                                              self._synced_head()))
        self.keeper = WeightKeeper(self.run_dir, self.state, self._log, keep_share(config.preset), token is not None)
        if token is not None and not config.keep_states:
            self.states = StateKeeper(self.run_dir, proof.keep_share(spec_rules.thresholds(), config.preset))

    @classmethod
    def resume(cls, run_dir: str | Path, *, progress: Any = None,
               search_factory: Callable[..., tuple[ArchitectureSearcher, HparamOptimiser]] = make_search,
               service: Service | None = None) -> Controller:
        run_dir = Path(run_dir)
        if not (run_dir / "run.json").exists() or not (run_dir / "events.jsonl").exists():
            raise ControllerError(f"{run_dir} holds no run to resume (run.json and events.jsonl expected)")
        lock_fh = lock(run_dir)
        try:
            run_json = read_run_json(run_dir)
            saved = run_json.get("config") or {}
            config = RunConfig.from_json(privacy.merge_config(saved, privacy.read_private(run_dir)))
            if "lr_scaling" not in saved:  # started by a runner that did not scale: keep its trials' rate
                config.lr_scaling = "none"
            writer = EventWriter(run_dir / "events.jsonl", durability="batch")  # drops a line cut short by the crash
            state = RunState()
            live_score = _LiveScore(run_dir, config.rules, state)  # listens while the log is replayed
            retention = RetentionAudit(state, keep_share(config.preset))  # the beacons finished trials met
            for event in iter_events(run_dir / "events.jsonl"):
                state.apply(event.data, event.line)
            if state.started_at is None:
                raise ControllerError(f"{run_dir}: the log has no run_started event")
            if state.finished:
                raise ControllerError(f"{run_dir}: the run already finished ({state.finish_reason}); nothing to resume")
            preset = get_preset(config.preset)
            backend = load_backend(config.backend)(run_dir, slots=config.slots,
                                                   devices_per_slot=config.devices_per_slot,
                                                   **config.backend_options)
            search, hparams = search_factory(preset, run_json["dataset"], config.seed, _history(run_dir, state))
            masker = privacy.resume_run(run_dir, backend.known_hosts())
            self = cls(run_dir, run_json, config, backend, search, hparams, state, writer, lock_fh, progress,
                       live_score, masker)
            raw = {pseudonym: name for name, pseudonym in masker.names.items()}
            for lost in state.slot_lost:  # the nodes the run stopped using stay excluded
                if lost.get("node"):
                    self._lose_node(raw.get(str(lost["node"]), str(lost["node"])), str(lost.get("reason")), log=False)
        except BaseException:
            unlock(lock_fh, run_dir)
            raise
        self._start_proposers()
        self._prepare_backend()
        self._log("run_resumed", run_id=run_json["run_id"])
        self.keeper = WeightKeeper(run_dir, state, self._log, keep_share(config.preset), state.token is not None,
                                   beacons=retention.beacon_of)
        self.witnessed_run = state.token is not None
        if self.witnessed_run and not config.keep_states:
            self.states = StateKeeper(run_dir, proof.keep_share(spec_rules.thresholds(), config.preset))
            self.states.replay(e.data for e in iter_events(run_dir / "events.jsonl"))
        if state.token is not None and service is not None:  # the same token, receipts continue
            self._start_witnessing(Witnessing(service, run_json["run_id"], token_interval(dict(state.token)),
                                              keys.load_private_key(), first_line_hash(run_dir / "events.jsonl")))
            assert self.witnessing is not None and self.witnessed_log is not None
            last = state.last_receipt
            for receipt in self.witnessing.missing_receipts(state.heartbeats, state.witnessed):
                self.witnessed_log.log_receipt(receipt)
                last = receipt
            self.witnessing.follow(last)  # the receipt chain goes on from the log's last receipt
        elif state.token is not None:
            self._say("this run is witnessed but no service is configured: it continues unwitnessed")
        self._recover_interrupted()
        # The killed controller may have ended trials without deleting their checkpoints.
        checkpoints.drop_all(run_dir / "trials", [t for t, tr in state.trials.items() if tr.status in checkpoints.DONE])
        return self

    def _recover_interrupted(self) -> None:
        """Attempts the killed controller left open: kill their processes, copy epochs, close them."""
        for tr in self.state.waiting():  # launched, perhaps, in the instant before the kill
            self.backend.reap_orphan(self.run_dir / "trials" / tr.trial)
        for att in self.state.running():
            tr = self.state.trials[att.trial]
            note = self.backend.reap_orphan(self.run_dir / "trials" / tr.trial)
            if note:
                self._say(f"{tr.trial}: {note}")
            tail = self._tail(tr.trial)
            self._copy_epochs(tr, tail)
            result = tail.result_for(att.attempt)
            if result is not None:
                self._finished(tr, att.attempt, result)
            else:
                self._log("trial_failed", trial=tr.trial, attempt=att.attempt, error=INTERRUPTED, retry=True)

    # ---- the loop -------------------------------------------------------------------------------------
    def _start_proposers(self) -> None:
        """The architecture search's thread, and the hyper-parameter search's where it has one
        (`start(depth)`: TPE points asked ahead, so a launch never waits on a fit)."""
        self.buffer.start()
        start = getattr(self.hparams, "start", None)
        if start is not None:
            start(ready_target(len(self.slots)))

    def _trial_argv(self) -> tuple[str, ...]:
        return (sys.executable, "-m", self.config.trial_module)

    def _prepare_backend(self) -> None:
        """The backend's start-up work (a warm-start process) before the clock starts, not inside the run."""
        self.backend.prepare(self._trial_argv())
        note = getattr(self.backend, "zygote_note", "")
        if note:
            self._say(f"attempts start cold: {note}")

    @property
    def deadline(self) -> float:
        assert self.state.started_at is not None
        return self.state.started_at + self.config.duration_s

    def request_stop(self, reason: str = "stopped") -> None:
        self._stop_reason = self._stop_reason or reason

    def run(self) -> str:
        """Run until the duration is over, a stop is requested or the search is exhausted."""
        reason = "stopped"
        try:
            news: set[TrialHandle] | None = None  # first pass: look at everything
            while True:
                if self._stop_reason is not None:
                    reason = self._stop_reason
                    break
                if time.time() >= self.deadline:
                    reason = "duration"
                    break
                self._check_running(news)
                self._launched()
                self._fill_slots()
                self._witness()
                if (not self.running and not self.launches.pending and not self.state.waiting()
                        and self.buffer.idle_exhausted):
                    reason = "exhausted"
                    break
                self._report_progress()
                self._sync_log()
                news = self._wait_for_news()
        except BaseException as exc:
            # A failure of the controller itself: stop cleanly, keep the log valid, then re-raise.
            try:
                self._finish("stopped", error=f"{type(exc).__name__}: {exc}")
            except Exception:  # noqa: BLE001 - the original failure is the one to report
                pass
            raise
        self._finish(reason)
        return reason

    def _sync_log(self, force: bool = False) -> None:
        """Group commit: the log's lines are on disk at most SYNC_S after they were written (each is
        flushed to the OS at once, so a killed controller loses none of them)."""
        now = time.monotonic()
        if force or now - self._synced_at >= SYNC_S:
            self.writer.sync()
            self._synced_at = now

    def _synced_head(self) -> str:
        self._sync_log(force=True)  # nothing the service has seen the hash of may be lost in a crash
        return self.writer.head

    def _wait_for_news(self) -> set[TrialHandle] | None:
        """The attempts with news, from the backend's own channel when it has one (None: look at
        every running attempt). Waits at least MIN_TICK_S, so that news arriving by the hundred per
        second is handled in batches, and at most POLL_S."""
        started = time.monotonic()
        news = self.backend.wait_changed(POLL_S)
        rest = MIN_TICK_S - (time.monotonic() - started)
        if news is not None and rest > 0:
            time.sleep(rest)
            news |= self.backend.wait_changed(0.0) or set()
        return news

    def _check_running(self, news: set[TrialHandle] | None = None) -> None:
        """Copy new epochs and close ended attempts: of those in `news`, or of every running one."""
        if news is None:
            items = list(self.running.items())
        else:
            items = [(i, self.running[i]) for i in (self._slot_of.get(h) for h in news) if i is not None]
        for slot_index, run in items:
            tail = self._tail(run.trial.trial)
            self._copy_epochs(run.trial, tail)
            rc = run.handle.poll()
            if rc is None:
                continue
            self._release(slot_index)
            self._copy_epochs(run.trial, tail)
            # A job launched without waiting for it to start may have run elsewhere than the nominal
            # nodes trial_started named: the ending event names where it ran.
            placed = run.handle.nodes
            ran_on = {"nodes": placed} if placed != run.nodes else {}
            result = tail.result_for(run.attempt)
            if result is not None:  # the trial completed (even if its process then died in teardown)
                self._finished(run.trial, run.attempt, result, **ran_on)
                continue
            error = tail.error_for(run.attempt) or self._failure_text(run, rc)
            node = stagedata.refused_node(error, placed, self.masker.host)
            node_failed = False
            if node is not None:
                why = f"the staged data was refused on node {node}: {error}"
            else:
                node = run.handle.lost_node()
                why, node_failed = f"node {node} failed: {error}", node is not None
            if node in self._excluded:
                node = None  # a job placed there before it was excluded: an ordinary failure
            # retry: the node's fault, not the trial's (a failed node's attempts all go elsewhere)
            self._failed(run.trial, run.attempt, error, retry=node is not None or node_failed, **ran_on)
            if node is not None:
                self._lose_node(node, why)

    def _failure_text(self, run: Running, rc: int) -> str:
        why = run.handle.describe_failure() or f"exit status {rc}"
        if rc == 0:
            why = "the trial program exited without writing its result"
        try:
            text = run.handle.spec.stderr.read_text(errors="replace")
        except OSError:
            text = ""
        tail = text[-STDERR_TAIL_CHARS:].strip()
        return f"{why}: {tail}" if tail else why

    def _finished(self, tr: TrialState, attempt: int, result: dict[str, Any], **ran_on: Any) -> None:
        best = result.get("best_accuracy")
        epoch_best = tr.epoch_best
        if best is None or (epoch_best is not None and epoch_best > best):
            best = epoch_best
        best = float(best) if best is not None else 0.0
        weights = {"weights_sha256": result["weights_sha256"]} if result.get("weights_sha256") else {}
        self._log("trial_finished", trial=tr.trial, attempt=attempt, epochs=int(result.get("epochs") or tr.epochs_counted),
                  best_accuracy=best, reason=result.get("reason") or "budget", **weights, **ran_on)
        if self.keeper is not None:
            self.keeper.finished(tr)
        # The program deletes it after its result; not if it died in between (teardown, a kill).
        checkpoints.drop(self.run_dir / "trials" / tr.trial)
        # Each accuracy goes with the architecture and hyper-parameters of the trial that produced it.
        self.buffer.observe(tr.arch_hash, best)
        self.hparams.tell(tr.trial, best)
        self._say(f"{tr.trial} finished: best accuracy {best:.4f} after {tr.epochs_counted} epochs")

    def _failed(self, tr: TrialState, attempt: int, error: str, retry: bool = False, **ran_on: Any) -> None:
        retry = retry or tr.failures < self.config.max_retries  # failures so far, before this one
        self._log("trial_failed", trial=tr.trial, attempt=attempt, error=error, retry=retry, **ran_on)
        if not retry:
            self.hparams.tell(tr.trial, None)  # no result: the optimiser closes its point
            checkpoints.drop(self.run_dir / "trials" / tr.trial)  # a retry would have resumed from it
        self._say(f"{tr.trial} attempt {attempt} failed ({error.splitlines()[0][:120] if error else ''})"
                  + ("; retrying" if retry else "; giving up"))

    def _release(self, slot_index: int) -> None:
        run = self.running.pop(slot_index)
        self._slot_of.pop(run.handle, None)
        self.tails.pop(run.trial.trial, None)  # a retry reads the trial's log afresh
        self._free_slot(slot_index)

    def _free_slot(self, slot_index: int) -> None:
        if slot_index in self._lost:  # lost while its attempt ran: it goes now
            self._log("slot_lost", slot=slot_index, **self._lost[slot_index])
        else:
            heapq.heappush(self._free, slot_index)

    def _lose_node(self, node: str, reason: str, log: bool = True) -> None:
        """Stop using `node`: the backend excludes it; each slot lost with it is logged (a busy one
        when its attempt ends) and never filled again. ControllerError when the backend cannot do
        without the node, or no slot is left (rather than a loop with nothing to run on)."""
        reason = reason[:STDERR_TAIL_CHARS]
        self._excluded.add(node)
        lost = self.backend.exclude_node(node, set(self._free))
        if lost is None:
            raise ControllerError(f"the {self.config.backend} backend has no other node to run on: {reason}")
        for index in sorted(lost - set(self._lost)):
            self._lost[index] = {"node": node, "reason": reason}
            if index in self._free:
                self._free.remove(index)
                heapq.heapify(self._free)
                if log:
                    self._log("slot_lost", slot=index, node=node, reason=reason)
        if len(self._lost) >= len(self.slots):
            raise ControllerError(f"no slot is left: the nodes of all {len(self.slots)} slots were excluded; "
                                  f"the last: {reason}")

    def _fill_slots(self) -> None:
        """Each free slot once, lowest first: work that grows with the free slots, not all of them."""
        refused: list[int] = []
        launching = self.launches.trials()
        while self._free:
            waiting = [t for t in self.state.waiting() if t.trial not in launching]
            tr = waiting[0] if waiting else self._next_trial()
            if tr is None:
                break
            index = heapq.heappop(self._free)
            if not self._launch(tr, self._slot_by_index[index]):
                refused.append(index)
            launching.add(tr.trial)
            # A wave of hundreds of launches takes minutes: heartbeats stay on their clock meanwhile.
            self._witness()
        for index in refused:
            heapq.heappush(self._free, index)

    def _next_trial(self) -> TrialState | None:
        if self._prepared:
            prep = self._prepared.popleft()
        else:
            candidate = self.buffer.take()
            if candidate is None:
                return None
            prep = self._prepare(candidate, len(self.state.trials), self.state.parent_trial(candidate.parent_hash))
        candidate = prep.candidate
        self._log("trial_proposed", trial=prep.trial, arch_hash=candidate.arch_hash, parent=prep.parent,
                  morphisms=candidate.morphisms, hparams=prep.hparams, hparam_source=prep.source, round=prep.round,
                  epoch_budget=prep.budget)
        return self.state.trials[prep.trial]

    def _prepare_first_wave(self) -> None:
        """Trial directories for every slot, before the clock: the parents of the first wave are
        trials of the first wave (or none), known here by architecture before any is logged."""
        trial_of: dict[str, str] = {}
        for seq in range(len(self.slots)):
            candidate = self.buffer.take()
            if candidate is None:
                break
            prep = self._prepare(candidate, seq, trial_of.get(candidate.parent_hash or ""))
            trial_of[candidate.arch_hash] = prep.trial
            self._prepared.append(prep)

    def _prepare(self, candidate: Candidate, seq: int, parent: str | None) -> _Prepared:
        """Trial number `seq` made of `candidate`: its hyper-parameters and its directory."""
        trial_id = f"t{seq:04d}"
        round_ = seq // len(self.slots)
        parent_state = self.state.trials.get(parent or "")
        hparams, source = self.hparams.suggest(trial_id, parent_state if parent_state is not None else parent,
                                               round_)
        budget = epoch_budget(self.config.epoch_budgets or self.preset.epoch_budgets, round_)
        trial_dir = self.run_dir / "trials" / trial_id
        if trial_dir.exists():  # left by a trial whose lines a crash of the machine lost (group commit)
            shutil.rmtree(trial_dir)
        trial_dir.mkdir(parents=True)
        (trial_dir / "graph.json").write_text(candidate.text or candidate.graph.dumps())
        _write_json(trial_dir / "hparams.json", hparams)
        dataset = self.run_json["dataset"]
        _write_json(trial_dir / "trial.json", {
            "trial": trial_id, "epoch_budget": budget, "precision": self.config.precision,
            "preset": self.config.preset, "dataset": dataset,  # the data root: local/private.json
            "seed": (self.config.seed * 1_000_003 + seq) % 2**31, "device_type": self.slots[0].device_type,
            "early_stopping_patience": self.config.early_stopping_patience,
            "num_classes": dataset["classes"], "image_size": dataset["image_size"], "rules": self.config.rules,
            "lr_scaling": self.config.lr_settings(), "cpu_bind": self.config.cpu_bind,
            "data_decoder": self.config.data_decoder,
            "commit_every_steps": proof.every_steps(spec_rules.thresholds(), self.config.preset),
            "keep_states": self.witnessed_run or self.config.keep_states,
        })
        # The live score counts this trial's epochs with the FLOPs the buffer counted on its side
        # (the graph file need not be read back, parsed and hashed on the controller's loop).
        if candidate.flops is not None and (self.config.rules != "v1-compat"
                                            or hparams.get("kernel_size", KERNEL_SIZE) == KERNEL_SIZE):
            self._score.known[trial_id] = candidate.flops
        return _Prepared(trial_id, candidate, parent, hparams, source, round_, budget)

    def _launch(self, tr: TrialState, slot: Slot) -> bool:
        attempt = tr.last_attempt + 1
        trial_dir = self.run_dir / "trials" / tr.trial
        argv = (*self._trial_argv(), str(self._trials_root / tr.trial), "--attempt", str(attempt),
                "--nproc", str(slot.devices_per_node))
        # The launch time: the trial program measures its start-up from it (rundir/timings.py).
        spec = LaunchSpec(trial_id=tr.trial, attempt=attempt, argv=argv, trial_dir=trial_dir,
                          stdout=trial_dir / "stdout.log", stderr=trial_dir / "stderr.log",
                          env={LAUNCHED_AT_ENV: repr(time.time())})
        if self.launches.background:  # its trial_started when the launch has returned (_launched)
            self.launches.start(tr, attempt, slot, spec)
            return True
        try:
            handle = self.backend.launch(spec, slot)
        except Exception as exc:  # noqa: BLE001 - a launch failure is the attempt's failure
            self._launch_failed(tr, attempt, slot, exc)
            return False
        self._started(tr, attempt, slot, handle)
        return True

    def _launched(self) -> None:
        """The launches in flight that returned: each attempt running, or failed at its launch."""
        for launch in self.launches.done():
            try:
                handle = launch.future.result()
            except Exception as exc:  # noqa: BLE001 - a launch failure is the attempt's failure
                self._launch_failed(launch.trial, launch.attempt, launch.slot, exc)
                self._free_slot(launch.slot.index)
                continue
            self.backend.adopt(handle)
            self._started(launch.trial, launch.attempt, launch.slot, handle)

    def _launch_failed(self, tr: TrialState, attempt: int, slot: Slot, exc: Exception) -> None:
        self._log("trial_started", trial=tr.trial, attempt=attempt, slot=slot.index, nodes=list(slot.nodes),
                  devices=slot.world_size)
        self._failed(tr, attempt, f"launch failed: {type(exc).__name__}: {exc}")
        self._launch_failures_in_a_row += 1
        if self._launch_failures_in_a_row >= LAUNCH_FAILURES_IN_A_ROW:
            raise ControllerError(f"the {self.config.backend} backend failed to launch "
                                  f"{self._launch_failures_in_a_row} attempts in a row; the last: "
                                  f"{type(exc).__name__}: {exc}") from exc

    def _started(self, tr: TrialState, attempt: int, slot: Slot, handle: TrialHandle) -> None:
        self._launch_failures_in_a_row = 0
        nodes = list(handle.nodes)
        self._log("trial_started", trial=tr.trial, attempt=attempt, slot=slot.index, nodes=nodes, devices=slot.world_size)
        self.running[slot.index] = Running(tr, attempt, slot, handle, nodes)
        self._slot_of[handle] = slot.index

    def _tail(self, trial: str) -> TrialTail:
        tail = self.tails.get(trial)
        if tail is None:
            tail = self.tails[trial] = TrialTail(self.run_dir / "trials" / trial / "events.jsonl", trial)
        return tail

    def _copy_epochs(self, tr: TrialState, tail: TrialTail) -> None:
        for line in tail.read():
            if line.get("type") == proof.EVENT and line.get("trial") == tr.trial:
                self._copy_states(tr, line)
                continue
            if line.get("type") != "epoch_end" or line.get("trial") != tr.trial:
                continue
            epoch = line.get("epoch")
            # An epoch is copied once: a retried attempt that re-ran it (no checkpoint yet) adds nothing.
            if not isinstance(epoch, int) or epoch <= tr.last_epoch:
                continue
            self._log("epoch_end", **{k: v for k, v in line.items() if k not in RESERVED})

    def _copy_states(self, tr: TrialState, line: Mapping[str, Any]) -> None:
        """An epoch's commitments, into the witnessed log before its epoch_end; once (a retry that logs
        them again from its checkpoint adds nothing)."""
        epoch = line.get("epoch")
        if not isinstance(epoch, int) or epoch <= tr.last_epoch or epoch <= self._states_copied.get(tr.trial, 0):
            return
        self._states_copied[tr.trial] = epoch
        self._log(proof.EVENT, **{k: v for k, v in line.items() if k not in RESERVED})

    def _finish(self, reason: str, error: str | None = None) -> None:
        cancel_reason = "duration" if reason == "duration" else "stop"
        # Launches still in flight, or returned since the last pass, never started as far as the log
        # says: their jobs are stopped after run_finished, by the backend's shutdown.
        # Every attempt is stopped first, then each is logged: the time from the end of the run to
        # run_finished (which counts in the score's time and in no slot's work) is one pass of log
        # lines, not of cancellations and file deletions (thousands of slots: seconds).
        running = list(self.running.items())
        for _slot_index, run in running:
            try:
                run.handle.cancel()
            except Exception as exc:  # noqa: BLE001
                self._say(f"{run.trial.trial}: cancel failed: {exc}")
        for slot_index, run in running:
            self._copy_epochs(run.trial, self._tail(run.trial.trial))
            self._log("trial_cancelled", trial=run.trial.trial, attempt=run.attempt, reason=cancel_reason)
            self.hparams.tell(run.trial.trial, None)
            self._release(slot_index)
        fields = {"reason": reason}
        if error:
            fields["error"] = error
        self._log("run_finished", **fields)
        # A trial cancelled just after writing its weights did not finish: they count for nothing.
        # (Their checkpoints go below, with every other trial's.)
        for _slot_index, run in running:
            (self.run_dir / "trials" / run.trial.trial / WEIGHTS).unlink(missing_ok=True)
        self._report_progress(force=True)
        try:
            if self.witnessed_log is not None:
                self.witnessed_log.final(FINAL_RECEIPT_WAIT_S)
            self.launches.close()
            self.backend.shutdown()
            # A finished run is never resumed: no checkpoint is of use now (retries that never
            # started, a SLURM job that wrote one more while its scancel took effect).
            checkpoints.drop_all(self.run_dir / "trials", self.state.trials)
        finally:
            if self.witnessing is not None:
                self.witnessing.stop()
            self.buffer.stop()
            getattr(self.hparams, "stop", lambda: None)()
            self.writer.close()
            unlock(self._lock_fh, self.run_dir)
            if self.progress is not None:
                self.progress.close()

    # ---- witness -----------------------------------------------------------------------------------
    def _start_witnessing(self, witnessing: Witnessing) -> None:
        self.witnessing = witnessing
        self.witnessed_log = WitnessedLog(
            witnessing, self._log, self._synced_head,
            lambda: (self._score.work, self.state.epoch_lines, self.state.best_epoch_accuracy),
            lambda beacon: self.keeper.receipt(beacon) if self.keeper is not None else None, self._say)

    def _witness(self) -> None:
        if self.witnessed_log is not None:
            self.witnessed_log.tick()

    # ---- log, progress -----------------------------------------------------------------------------
    def _log(self, kind: str, **fields: Any) -> dict[str, Any]:
        # Masked as written, so that the signature and the hash chain cover what is published.
        event = self.writer.append(kind, **privacy.mask_event(self.masker, self.run_dir, kind, fields))
        self.state.apply(event)  # the live score listens to the state
        if self.states is not None:
            self.states.take(event)
        return event

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress.note(message)

    def snapshot(self) -> dict[str, Any]:
        now = time.time()
        started = self.state.started_at or now
        return {
            "run_id": self.run_json["run_id"], "preset": self.config.preset, "run_dir": str(self.run_dir),
            "elapsed_s": now - started, "duration_s": self.config.duration_s,
            "remaining_s": max(0.0, self.deadline - now) if self.state.started_at else self.config.duration_s,
            "slots": len(self.slots), "slots_busy": len(self.running) + len(self.launches.pending),
            "running": [{"slot": r.slot.index, "trial": r.trial.trial, "attempt": r.attempt,
                         "epochs": r.trial.epochs_counted, "budget": r.trial.epoch_budget}
                        for r in sorted(self.running.values(), key=lambda r: r.slot.index)],
            "trials_finished": self.state.count("finished"), "trials_failed": self.state.count("failed"),
            "trials_proposed": len(self.state.trials), "epochs": self.state.epoch_lines,
            "best_accuracy": self.state.best_accuracy(), "score_ops": self._score.current(),
            "finished": self.state.finished, "finish_reason": self.state.finish_reason,
        }

    def _report_progress(self, force: bool = False) -> None:
        if self.progress is not None:
            self.progress.update(self.snapshot, force=force)


class _LiveScore(ScoreAccumulator):
    """The current score, by spec/scoring.py listening to the controller's state as events are written."""

    def __init__(self, run_dir: Path, rules: str, state: RunState) -> None:
        self.known: dict[str, tuple[float, float]] = {}  # trial -> FLOPs per image, counted by the proposer
        from_files = run_flops_fn(RunDir(run_dir), rules)

        def flops_for(trial: str) -> tuple[float, float] | None:
            known = self.known.pop(trial, None)
            return known if known is not None else from_files(trial)

        super().__init__(rules, flops_for, replay=state)
        self._cache: tuple[float, float | None] = (-1e9, None)

    def on_epoch(self, ev: Mapping[str, Any], trial: TrialState, attempt: Attempt | None, counted: bool,
                 line: int) -> None:
        try:
            super().on_epoch(ev, trial, attempt, counted, line)
        except Exception:  # noqa: BLE001 - the display must never stop the run
            pass

    def current(self, max_age_s: float = 2.0) -> float | None:
        now = time.monotonic()
        if now - self._cache[0] > max_age_s:
            try:
                value: float | None = self.series().score
            except Exception:  # noqa: BLE001
                value = None
            self._cache = (now, value)
        return self._cache[1]


def _history(run_dir: Path, state: RunState) -> list[dict[str, Any]]:
    """The log's trials in proposal order, as `make_search` rebuilds the searches from them."""
    history = []
    for tr in state.trials.values():
        parent = state.trials.get(tr.parent or "")
        graph = json.loads((run_dir / "trials" / tr.trial / "graph.json").read_text())
        history.append({"trial": tr.trial, "graph": graph, "arch_hash": tr.arch_hash,
                        "parent_hash": parent.arch_hash if parent else None, "parent": tr.parent,
                        "morphisms": tr.morphisms, "hparams": tr.hparams, "hparam_source": tr.hparam_source,
                        "round": tr.round,
                        "accuracy": tr.best_accuracy if tr.status == "finished" else None})
    return history


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


