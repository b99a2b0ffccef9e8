"""The AIPerf-LLM run (`aiperf-runner run --workload llm`): the architecture search over transformer shapes
and TPE over the hyper-parameters, each trial trained data-parallel over its slot.

Trials run through a Backend (backends/base.py; run/llmlaunch.py), as the image workload's do: `local` by
default (a process group per attempt on this machine, each slot its own GPUs through CUDA_VISIBLE_DEVICES, or
its share of the cores), `slurm` with `--backend slurm` (a batch job per attempt, submitted from threads beside
the loop; a multi-node slot runs the trial program under torchrun on each node, and the trial takes its rank
from the environment). The controller writes `run.json` (`workload: llm`; `config.backend` and the public
`backend_options`, the backend's facts in `system`, e.g. `system.slurm`, as an image run records them; the
site's own options in `local/private.json`: run/llmstartup.py) and the hash-chained `events.jsonl`; every trial
gets a directory `trials/<id>/` with its `trial.json` and each attempt runs `python -m
aiperf_runner.train.llm.trialmain TRIAL_DIR` on its slot, its output in `attempt-<n>.out`. A resume stops what
a killed controller left running through `Backend.reap_orphan` (the local backend's pid file, the SLURM job ids
in `slurm-<n>.jobid`). A child is launched once its parent has finished (it starts from the
parent's weights); until then its proposal waits. Main-log events (docs/log-format.md, "AIPerf-LLM runs"):
run_started, trial_proposed, trial_started, train_end (copied from the trial's log), trial_finished,
trial_failed, trial_cancelled, run_finished. At the duration, running trials are stopped and their work is
not counted (only a trial's `train_end` counts).

A shard preset (`llm`, `llm-bytes`: data/llmshards.py) trains on the token shards in `--data DIR`: before the
clock starts the run verifies their manifest (every shard re-hashed; the time is printed, never scored) and
refuses shards the preset does not bind; run.json's `dataset` records the manifest's digest, tokenizer and token
counts, each trial.json the digest (`data_digest`), and `local/private.json` the directory (never bundled).
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiperf_runner import __version__
from aiperf_runner.backends.base import Backend, Slot, TrialHandle
from aiperf_runner.backends.local import LocalBackend
from aiperf_runner.run import llmlaunch, llmstartup, llmwitness
from aiperf_runner.run.llmstartup import LlmRunConfig, LlmRunError
from aiperf_runner.search.llmhparams import LlmHparamSearch
from aiperf_runner.search.llmsearch import LlmArchitectureSearch, LlmProposal
from aiperf_runner.spec import SPEC_VERSION
from aiperf_runner.spec.eventlog import EventWriter, read_events
from aiperf_runner.spec.llmrules import RULES, WORKLOAD, LlmPreset, llm_preset, score_ops, trial_seed

__all__ = ["POLL_S", "LlmRun", "LlmRunConfig", "LlmRunError", "summary"]

if TYPE_CHECKING:
    from aiperf_runner.client.service import Service

POLL_S = 0.2
SearchFactory = Callable[[LlmPreset, int], tuple[LlmArchitectureSearch, LlmHparamSearch]]


@dataclass
class _Trial:
    trial: str
    proposal: LlmProposal
    parent: str | None
    hparams: dict[str, Any]
    source: str
    round: int
    attempt: int = 0
    slot: int | None = None
    handle: TrialHandle | None = None  # the running attempt's, from its backend
    copied: int = 0
    loss: float | None = None
    done: bool = False
    flops: int = 0  # of its last training record


@dataclass
class LlmRun:
    run_dir: Path
    config: LlmRunConfig
    preset: LlmPreset
    run_json: dict[str, Any]
    log: EventWriter
    search: LlmArchitectureSearch
    hparams: LlmHparamSearch
    backend: Backend
    slots: list[Slot]
    say: Callable[[str], None] = print
    trials: dict[str, _Trial] = field(default_factory=dict)
    by_hash: dict[str, str] = field(default_factory=dict)
    waiting: deque[_Trial] = field(default_factory=deque)
    running: dict[int, _Trial] = field(default_factory=dict)
    exhausted: bool = False
    started_at: float = field(default_factory=time.time)
    witness: llmwitness.LlmWitness | None = None  # a witnessed run's heartbeats and receipts (run/llmwitness.py)
    records: int = 0  # training records (train_end lines) in the main log
    stop_reason: str | None = None  # set by request_stop (another thread, a signal handler)
    progress: Any = None  # run/progress.py's display (`run --progress`); None: no status display
    failures: int = 0  # attempts that failed
    launches: llmlaunch.LlmLaunches = field(init=False)

    def __post_init__(self) -> None:
        self.launches = llmlaunch.LlmLaunches(self.backend)

    @classmethod
    def create(cls, config: LlmRunConfig, run_dir: str | Path, say: Callable[[str], None] = print,
               search_factory: SearchFactory | None = None, service: Service | None = None,
               registration: Mapping[str, Any] | None = None) -> LlmRun:
        """A new run in `run_dir`. `search_factory(preset, seed)` -> (architecture search, hyper-parameter
        search) replaces the searches as built (bench/search_quality.py's baselines, search/llmbaselines.py);
        `resume` always rebuilds the searches as built. With `service` and `registration` (the registered system
        the run is judged by) the run is witnessed: the service gives its run id and token."""
        preset = llm_preset(config.preset)
        llmstartup.check_data(preset)
        run_dir = Path(run_dir)
        if (run_dir / "run.json").exists():
            raise LlmRunError(f"{run_dir} already holds a run: choose another --out")
        if config.rehearsal and (service is None or registration is None):
            raise LlmRunError("--rehearsal needs --system: a rehearsal is witnessed by the service like an official run")
        if config.data is not None:
            config.data = os.path.abspath(config.data)  # the trials and a --resume may start elsewhere
        dataset = llmstartup.check_shards(preset, config.data, say)
        (run_dir / "trials").mkdir(parents=True, exist_ok=True)
        config.duration_s = config.duration_s or preset.default_duration_s
        backend, slots = llmstartup.open_backend(config, run_dir)
        try:
            run_json, token = llmstartup.new_run_json(config, preset, dataset, run_dir, backend, slots, service, registration)
            if search_factory is None:
                search = LlmArchitectureSearch(preset.seed_arch, **_search_options(preset, config))
                hparams = LlmHparamSearch(seed=config.seed, **_hparam_options(preset))
            else:
                search, hparams = search_factory(preset, config.seed)
            backend.prepare(llmstartup.trial_argv(config))  # before the clock (the local backend's zygote, when asked for)
        except BaseException:
            backend.shutdown()
            raise
        log = EventWriter(run_dir / "events.jsonl")
        self = cls(run_dir, config, preset, run_json, log, search, hparams, backend, slots, say)
        witnessed = {"token": token["token"]} if token else {}
        self.started_at = log.append("run_started", run_id=run_json["run_id"], workload=WORKLOAD, preset=preset.name, rules=RULES,
                   slots=config.slots, devices_per_slot=config.devices_per_slot, runner_version=__version__,
                   spec_version=SPEC_VERSION, dataset=dataset, device_type=run_json["device_type"],
                   **witnessed)["t"]
        if token is not None and service is not None:
            self.witness = llmwitness.LlmWitness(service, token["token"], log, self._figures, say)
        return self

    @classmethod
    def resume(cls, run_dir: str | Path, say: Callable[[str], None] = print,
               service: Service | None = None) -> LlmRun:
        """Continue a run whose controller was killed: its searches rebuilt from the log, attempts that were
        running stopped and logged failed (to be retried), proposals that never started queued again; the
        duration still counts from the run's start. A witnessed run goes on witnessed with `service`."""
        run_dir = Path(run_dir)
        run_json = json.loads((run_dir / "run.json").read_text())
        config = llmstartup.resumed_config(run_dir, run_json)
        preset = llm_preset(config.preset)
        if preset.shards is not None:
            config.data = llmstartup.resumed_shards(run_dir, preset, run_json)
        log = EventWriter(run_dir / "events.jsonl")  # drops a line cut short by the kill
        events = read_events(run_dir / "events.jsonl")
        if events[-1]["type"] == "run_finished":
            log.close()
            raise LlmRunError(f"{run_dir}: the run finished ({events[-1]['reason']}); there is nothing to resume")
        try:
            backend, slots = llmstartup.open_backend(config, run_dir)
        except BaseException:
            log.close()
            raise
        slots = slots[:run_json["slots"]]  # never more trials at once than the run declared
        trials = _trials_of(events)
        by_trial_hash = {t.trial: t.proposal.arch_hash for t in trials.values()}
        search = LlmArchitectureSearch.from_history(preset.seed_arch, [
            {"arch": t.proposal.arch, "arch_hash": t.proposal.arch_hash,
             "parent_hash": by_trial_hash.get(t.parent) if t.parent else None,
             "growths": list(t.proposal.growths), "loss": t.loss} for t in trials.values()],
            **_search_options(preset, config))
        hparams = LlmHparamSearch.from_history(
            [{"trial": t.trial, "hparams": t.hparams, "loss": t.loss, "hparam_source": t.source}
             for t in trials.values()], seed=config.seed, **_hparam_options(preset))
        self = cls(run_dir, config, preset, run_json, log, search, hparams, backend, slots, say, trials=trials,
                   by_hash={t.proposal.arch_hash: t.trial for t in trials.values()},
                   started_at=events[0]["t"])
        backend.prepare(llmstartup.trial_argv(config))
        self.records = sum(e["type"] == "train_end" for e in events)
        log.append("run_resumed", run_id=run_json["run_id"])
        if service is not None:
            self.witness = llmwitness.LlmWitness.resumed(service, events, log, self._figures, say)
        elif "token" in events[0]:
            say("this run is witnessed but no service is configured: it continues unwitnessed")
        for trial in trials.values():
            if trial.done:
                continue
            # Running when the controller died, or perhaps launched in the instant before (a submit in flight).
            note = backend.reap_orphan(run_dir / "trials" / trial.trial)
            if note:
                say(f"{trial.trial}: {note}")
            if trial.slot is not None:
                trial.slot = None
                self._failed(trial, "the controller stopped while it ran (resumed)")
            else:
                self.waiting.append(trial)
        return self

    # ---- the loop ---------------------------------------------------------------------------------

    def request_stop(self, reason: str = "stopped") -> None:
        """End the run at the loop's next turn, as its duration would: running attempts are cancelled and
        their work is not counted. Safe from another thread."""
        self.stop_reason = self.stop_reason or reason

    def run(self) -> str:
        assert self.config.duration_s is not None
        deadline = self.started_at + self.config.duration_s  # counted from the run's start, across resumes
        reason, error = "duration", None
        try:
            while True:
                # A requested stop comes first, as in the image controller: a resumed run asked to stop says
                # so, even when its duration ran out while it was down.
                if self.stop_reason is not None:
                    reason = self.stop_reason
                    break
                if time.time() >= deadline:
                    break
                self._poll()
                self._launched()
                self._fill()
                if self.witness is not None:
                    self.witness.tick()
                if self.progress is not None:
                    self.progress.update(self.snapshot)
                if self.exhausted and not self.running and not self.waiting and not self.launches.pending:
                    reason = "exhausted"
                    break
                # Wakes as soon as an attempt writes its log or ends (inotify, a pidfd; stat for SLURM's).
                self.backend.wait_changed(max(0.0, min(POLL_S, deadline - time.time())))
        except KeyboardInterrupt:
            reason = "stopped"
        except llmlaunch.LlmBackendError as exc:  # the backend refuses every launch
            reason, error = "stopped", str(exc)
        self._end(reason, error)
        if error is not None:
            raise LlmRunError(error)
        return reason

    def _end(self, reason: str, error: str | None) -> None:
        """Running attempts stopped and logged cancelled, `run_finished`, then the backend shut down (launches
        still in flight never started as far as the log says: their jobs go with the shutdown)."""
        try:
            self._poll()
            self._stop_all("duration" if reason == "duration" else "stop")
            self.log.append("run_finished", reason=reason, **({"error": error} if error else {}))
            if self.witness is not None:
                self.witness.finish()
            if self.progress is not None:
                self.progress.update(lambda: {**self.snapshot(), "finished": True, "finish_reason": reason}, force=True)
                self.progress.close()
        finally:
            self.launches.close()
            self.backend.shutdown()
            self.log.close()

    def snapshot(self) -> dict[str, Any]:
        """The run so far for run/progress.py's displays (the image controller's keys; `best_loss` for accuracy)."""
        assert self.config.duration_s is not None
        elapsed = time.time() - self.started_at
        losses = [t.loss for t in self.trials.values() if t.loss is not None]
        flops, _records, _accuracy = self._figures()  # what the heartbeats report
        return {"workload": WORKLOAD, "run_id": self.run_json["run_id"], "preset": self.preset.name,
                "elapsed_s": elapsed, "duration_s": self.config.duration_s,
                "remaining_s": max(0.0, self.config.duration_s - elapsed), "slots": len(self.slots),
                "slots_busy": len(self.running), "trials_finished": len(losses), "trials_failed": self.failures,
                "trials_proposed": len(self.trials), "best_loss": min(losses) if losses else None,
                "score_ops": score_ops(int(flops), elapsed) if elapsed > 0 else None,
                "running": [{"slot": slot, "trial": t.trial, "attempt": t.attempt,
                             "growth": "+".join(t.proposal.morphisms) or "seed"} for slot, t in sorted(self.running.items())]}

    def _figures(self) -> tuple[float, int, float | None]:
        finished = [t for t in self.trials.values() if t.loss is not None]
        return llmwitness.figures_of([t.loss for t in finished if t.loss is not None],
                                     float(sum(t.flops for t in finished)), self.records)

    def _fill(self) -> None:
        for slot in self.slots:
            if slot.index in self.running or slot.index in self.launches.pending:
                continue
            trial = self._next()
            if trial is None:
                return
            self._launch(trial, slot)

    def _next(self) -> _Trial | None:
        """A waiting trial whose parent has finished, else a new proposal (which may have to wait)."""
        for trial in list(self.waiting):
            parent = self.trials.get(trial.parent) if trial.parent else None
            if parent is None or parent.loss is not None:
                self.waiting.remove(trial)
                return trial
            if parent.done:  # its parent failed for good: nothing to grow from
                self.waiting.remove(trial)
                self.hparams.tell(trial.trial, None)
        while len(self.waiting) < self.config.slots and not self.exhausted:
            proposal = self.search.propose()
            if proposal is None:
                self.exhausted = True
                break
            trial = self._new_trial(proposal)
            parent = self.trials.get(trial.parent) if trial.parent else None
            if parent is None or parent.loss is not None:
                return trial
            self.waiting.append(trial)
        return None

    def _new_trial(self, proposal: LlmProposal) -> _Trial:
        trial_id = f"t{len(self.trials) + 1:04d}"
        parent = self.by_hash.get(proposal.parent_hash) if proposal.parent_hash else None
        round_ = len(self.trials) // self.config.slots
        hp, source = self.hparams.suggest(trial_id, parent, round_)
        trial = _Trial(trial_id, proposal, parent, hp, source, round_)
        self.trials[trial_id] = trial
        self.by_hash[proposal.arch_hash] = trial_id
        self.log.append("trial_proposed", trial=trial_id, arch=proposal.arch.to_dict(), arch_hash=proposal.arch_hash,
                        parent=parent, growths=list(proposal.growths), hparams=hp, hparam_source=source,
                        round=round_, steps=self.preset.steps_per_trial)
        return trial

    def _launch(self, trial: _Trial, slot: Slot) -> None:
        trial.attempt += 1
        trial.slot, trial.copied = slot.index, 0
        trial_dir = self.run_dir / "trials" / trial.trial
        trial_dir.mkdir(parents=True, exist_ok=True)
        (trial_dir / "events.jsonl").unlink(missing_ok=True)  # an earlier attempt's log
        parent = self.trials[trial.parent] if trial.parent else None
        spec = {"trial": trial.trial, "attempt": trial.attempt, "preset": self.preset.name,
                "arch": trial.proposal.arch.to_dict(), "growths": list(trial.proposal.growths),
                "parent": parent.trial if parent else None,  # a sibling directory: no local path in the bundle
                "parent_arch": parent.proposal.arch.to_dict() if parent else None, "hparams": trial.hparams,
                "steps": self.preset.steps_per_trial, "seed": trial_seed(self.config.seed, trial.trial),
                "world": slot.world_size}
        if self.preset.shards is not None:  # the trial refuses shards whose manifest is not the run's
            spec["data_digest"] = self.run_json["dataset"]["digest"]
        (trial_dir / "trial.json").write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
        launch = llmlaunch.attempt_spec(self.run_dir, trial.trial, trial.attempt, self.config.trial_module,
                                        self._trial_env())
        launched = self.launches.start(trial.trial, launch, slot)
        if launched is not None:  # else its trial_started once the launch has returned (_launched)
            self._started(launched)

    def _trial_env(self) -> dict[str, str]:
        """The threads of each rank where the backend shares this machine's cores out; elsewhere (a SLURM job)
        the trial takes its node's CPUs (train/distenv.py cpu_budget)."""
        if not isinstance(self.backend, LocalBackend):
            return {}
        threads = str(self.backend.threads)
        return {"AIPERF_THREADS_PER_RANK": threads, "OMP_NUM_THREADS": threads}

    def _launched(self) -> None:
        for launched in self.launches.done():
            self._started(launched)

    def _started(self, launched: llmlaunch.Launched) -> None:
        """`trial_started` of a launch that returned; one the backend refused fails at once (to be retried)."""
        trial = self.trials[launched.trial]
        self.log.append("trial_started", trial=trial.trial, attempt=trial.attempt, slot=launched.slot.index,
                        devices=launched.slot.world_size)
        if launched.handle is None:
            trial.slot = None
            self._failed(trial, f"launch failed: {type(launched.error).__name__}: {launched.error}")
            return
        trial.handle = launched.handle
        self.running[launched.slot.index] = trial

    def _poll(self) -> None:
        for slot, trial in list(self.running.items()):
            self._copy(trial)
            assert trial.handle is not None
            rc = trial.handle.poll()
            if rc is None:
                continue
            self._copy(trial)
            del self.running[slot]
            result = self._trial_lines(trial, "trial_result")
            if rc == 0 and result:
                self._finished(trial, result[-1])
            else:
                errors = self._trial_lines(trial, "trial_error")
                how = trial.handle.describe_failure() or f"exit status {rc}"
                self._failed(trial, errors[-1]["error"] if errors else f"the trial program ended: {how}")

    def _trial_lines(self, trial: _Trial, kind: str) -> list[dict[str, Any]]:
        path = self.run_dir / "trials" / trial.trial / "events.jsonl"
        if not path.exists():
            return []
        return [e for e in read_events(path) if e["type"] == kind]

    def _copy(self, trial: _Trial) -> None:
        """The trial's `train_end` into the main log, once."""
        for line in self._trial_lines(trial, "train_end")[trial.copied:]:
            fields = {k: v for k, v in line.items() if k not in ("seq", "t", "type", "prev")}
            self.log.append("train_end", **fields)
            trial.copied += 1
            self.records += 1
            trial.flops = int(fields.get("flops") or 0)

    def _finished(self, trial: _Trial, result: dict[str, Any]) -> None:
        loss = float(result["val_loss"])
        trial.loss, trial.done = loss, True
        # The moments' digest binds a parent's whole state (the weights and AdamW's moments a child starts from)
        # to the log, for the audit's re-execution of its children (train/llm/reexecute.py).
        moments = {"optimizer_sha256": result["optimizer_sha256"]} if result.get("optimizer_sha256") else {}
        self.log.append("trial_finished", trial=trial.trial, attempt=trial.attempt, val_loss=loss,
                        weights_sha256=result["weights_sha256"], **moments)
        self.search.observe(trial.proposal.arch_hash, loss)
        self.hparams.tell(trial.trial, loss)
        best = min(t.loss for t in self.trials.values() if t.loss is not None)
        self.say(f"{trial.trial} {'+'.join(trial.proposal.morphisms) or 'seed'}: "
                 f"{len(trial.proposal.arch.layers)} blocks, val loss {loss:.4f} (best {best:.4f})")

    def _failed(self, trial: _Trial, error: str) -> None:
        retry = trial.attempt <= self.config.max_retries and "GrowthRefused" not in error
        self.log.append("trial_failed", trial=trial.trial, attempt=trial.attempt, error=error[:2000], retry=retry)
        self.failures += 1
        self.say(f"{trial.trial} failed (attempt {trial.attempt}): {error}")
        if retry:
            self.waiting.appendleft(trial)
        else:
            trial.done = True
            self.hparams.tell(trial.trial, None)

    def _stop_all(self, reason: str) -> None:
        """Every running attempt cancelled first, then each logged: the end of the run to run_finished is one
        pass of log lines, not of cancellations (as the image controller's stop)."""
        stopping = list(self.running.values())
        self.running.clear()
        for trial in stopping:
            assert trial.handle is not None
            try:
                trial.handle.cancel()
            except Exception as exc:  # noqa: BLE001 - the backend's shutdown stops it anyway
                self.say(f"{trial.trial}: cancel failed: {exc}")
        for trial in stopping:
            self.log.append("trial_cancelled", trial=trial.trial, attempt=trial.attempt, reason=reason)


def summary(run_dir: Path) -> dict[str, Any]:
    """What the run did, from its log: trials finished, tokens and FLOPs trained, best validation loss."""
    events = read_events(run_dir / "events.jsonl")
    finished = {(e["trial"], e["attempt"]) for e in events if e["type"] == "trial_finished"}
    # an attempt stopped after its training (at the duration, or by a kill) counts nothing, as verify says
    trained = [e for e in events if e["type"] == "train_end" and (e["trial"], e["attempt"]) in finished]
    losses = [e["val_loss"] for e in events if e["type"] == "trial_finished"]
    return {"trials_finished": len(losses), "tokens": sum(e["tokens_trained"] for e in trained),
            "flops": sum(e["flops"] for e in trained), "best_loss": min(losses) if losses else None,
            "morphisms": sorted({g for e in trained for g in e["growths"]})}


def _hparam_options(preset: LlmPreset) -> dict[str, Any]:
    """The hyper-parameter search's options for `preset`: its batches, and its seed point's rate if it has one."""
    if preset.seed_lr is None:
        return {"batch_tokens": preset.batch_tokens}
    from aiperf_runner.search.llmhparams import DEFAULTS, LlmSpace, _nearest

    seed_point = {**DEFAULTS, "lr": preset.seed_lr,
                  "batch_tokens": _nearest(DEFAULTS["batch_tokens"], preset.batch_tokens)}
    return {"space": LlmSpace(batch_tokens=preset.batch_tokens, defaults=seed_point)}


def _search_options(preset: LlmPreset, config: LlmRunConfig) -> dict[str, Any]:
    return {"rng_seed": config.seed, "max_layers": preset.max_layers, "max_mlp_hidden": preset.max_mlp_hidden,
            "max_heads_per_layer": preset.max_heads_per_layer}


def _trials_of(events: list[dict[str, Any]]) -> dict[str, _Trial]:
    """The trials of a log as the controller keeps them: proposal, attempts, result; `slot` set for an attempt
    that started and never ended."""
    from aiperf_runner.spec.llmflops import LlmArch

    trials: dict[str, _Trial] = {}
    for ev in events:
        kind = ev["type"]
        if kind == "trial_proposed":
            proposal = LlmProposal(LlmArch.from_dict(ev["arch"]), ev["arch_hash"], None, tuple(ev["growths"]))
            trials[ev["trial"]] = _Trial(ev["trial"], proposal, ev["parent"], ev["hparams"], ev["hparam_source"],
                                         ev["round"])
            continue
        trial = trials.get(ev.get("trial", ""))
        if trial is None:
            continue
        if kind == "trial_started":
            trial.attempt, trial.slot = ev["attempt"], ev["slot"]
        elif kind == "trial_finished":
            trial.loss, trial.done, trial.slot = float(ev["val_loss"]), True, None
        elif kind in ("trial_failed", "trial_cancelled"):
            trial.slot = None
            trial.done = kind == "trial_failed" and not ev["retry"]
    return trials
