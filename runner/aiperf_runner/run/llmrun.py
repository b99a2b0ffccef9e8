"""The AIPerf-LLM run (`aiperf-runner run --workload llm`): the architecture search over transformer shapes
and TPE over the hyper-parameters, each trial trained data-parallel over its slot on this machine.

The controller writes `run.json` (`workload: llm`) and the hash-chained `events.jsonl`; every trial gets a
directory `trials/<id>/` with its `trial.json` and runs `python -m aiperf_runner.train.llm.trialmain` there
(its processes share the slot's cores). A child is launched once its parent has finished (it starts from the
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
import secrets
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiperf_runner import __version__
from aiperf_runner.run import llmwitness
from aiperf_runner.rundir.privacy import read_private, write_private
from aiperf_runner.search.llmhparams import LlmHparamSearch
from aiperf_runner.search.llmsearch import LlmArchitectureSearch, LlmProposal
from aiperf_runner.spec import SPEC_VERSION
from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.eventlog import EventWriter, read_events
from aiperf_runner.spec.llmrules import LLM_PRESETS, RULES, WORKLOAD, LlmPreset, llm_preset, trial_seed
from aiperf_runner.util import sysinfo

if TYPE_CHECKING:
    from aiperf_runner.client.service import Service

POLL_S = 0.2
SearchFactory = Callable[[LlmPreset, int], tuple[LlmArchitectureSearch, LlmHparamSearch]]


class LlmRunError(AiperfError, RuntimeError):
    """An LLM run that cannot start."""


@dataclass
class LlmRunConfig:
    preset: str = "llm-smoke"
    slots: int = 1
    duration_s: float | None = None
    seed: int = 0
    devices_per_slot: int = 0  # 0: this machine's cores (or GPUs) shared out between the slots
    max_retries: int = 1
    trial_module: str = "aiperf_runner.train.llm.trialmain"  # the trial program (tests run dishonest ones)
    data: str | None = None  # a shard preset's token shards (data/llmshards.py); the byte presets make their text
    rehearsal: bool = False  # run --rehearsal: on a rehearsal token (never ranked; submit --rehearsal)


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
    process: subprocess.Popen[bytes] | None = None
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
    say: Callable[[str], None] = print
    trials: dict[str, _Trial] = field(default_factory=dict)
    by_hash: dict[str, str] = field(default_factory=dict)
    waiting: deque[_Trial] = field(default_factory=deque)
    running: dict[int, _Trial] = field(default_factory=dict)
    exhausted: bool = False
    started_at: float = field(default_factory=time.time)
    witness: llmwitness.LlmWitness | None = None  # a witnessed run's heartbeats and receipts (run/llmwitness.py)
    records: int = 0  # training records (train_end lines) in the main log

    @classmethod
    def create(cls, config: LlmRunConfig, run_dir: str | Path, say: Callable[[str], None] = print,
               search_factory: SearchFactory | None = None, service: Service | None = None,
               registration: Mapping[str, Any] | None = None) -> LlmRun:
        """A new run in `run_dir`. `search_factory(preset, seed)` -> (architecture search, hyper-parameter
        search) replaces the searches as built (bench/search_quality.py's baselines, search/llmbaselines.py);
        `resume` always rebuilds the searches as built. With `service` and `registration` (the registered system
        the run is judged by) the run is witnessed: the service gives its run id and token."""
        preset = llm_preset(config.preset)
        _check_data(preset)
        run_dir = Path(run_dir)
        if (run_dir / "run.json").exists():
            raise LlmRunError(f"{run_dir} already holds a run: choose another --out")
        if config.data is not None:
            config.data = os.path.abspath(config.data)  # the trials and a --resume may start elsewhere
        dataset = _check_shards(preset, config.data, say)
        (run_dir / "trials").mkdir(parents=True, exist_ok=True)
        if config.data is not None:
            write_private(run_dir, {"data": config.data})  # a path of the site: never in run.json or the bundle
        config.duration_s = config.duration_s or preset.default_duration_s
        config.devices_per_slot = config.devices_per_slot or _devices_per_slot(config.slots)
        device_type = _device_type()
        # The machine as for image runs (accelerators used, CPU, software) and its peak at the trainer's precision
        # (bf16 autocast on CUDA, fp32 on a CPU: train/llm/trainer.py), for the list's efficiency column.
        system = sysinfo.collect(config.slots, config.devices_per_slot, device_type)
        peaks, peak_sources = sysinfo.declared_peaks(system)
        run_json = {
            "workload": WORKLOAD, "run_id": secrets.token_hex(16), "preset": preset.name, "rules": RULES,
            "slots": config.slots, "devices_per_slot": config.devices_per_slot, "duration_s": config.duration_s,
            "seed": config.seed, "max_retries": config.max_retries, "runner_version": __version__,
            **({"trial_module": config.trial_module} if config.trial_module != LlmRunConfig.trial_module else {}),
            "spec_version": SPEC_VERSION, "dataset": dataset, "device_type": device_type,
            "precision": "bf16" if device_type == "cuda" else "fp32", "system": system,
            "declared_peak_flops": peaks, "declared_peak_source": peak_sources, "created_at": time.time(),
            # What a run token binds, where an image run's run.json keeps it (spec/witness.py TOKEN_BOUND).
            "config": {"slots": config.slots, "devices_per_slot": config.devices_per_slot,
                       "duration_s": config.duration_s, **({"rehearsal": True} if config.rehearsal else {})},
        }
        token = None
        if config.rehearsal and (service is None or registration is None):
            raise LlmRunError("--rehearsal needs --system: a rehearsal is witnessed by the service like an official run")
        if service is not None and registration is not None:
            system.update(id=registration["id"], registration=dict(registration),
                          name=system.get("name") or registration.get("name") or "")
            token = llmwitness.ask(service, registration, run_json)
            run_json["run_id"] = token["run_id"]
        (run_dir / "run.json").write_text(json.dumps(run_json, indent=2, sort_keys=True) + "\n")
        if search_factory is None:
            search = LlmArchitectureSearch(preset.seed_arch, **_search_options(preset, config))
            hparams = LlmHparamSearch(seed=config.seed, **_hparam_options(preset))
        else:
            search, hparams = search_factory(preset, config.seed)
        log = EventWriter(run_dir / "events.jsonl")
        self = cls(run_dir, config, preset, run_json, log, search, hparams, say)
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
        config = LlmRunConfig(preset=run_json["preset"], slots=run_json["slots"], duration_s=run_json["duration_s"],
                              seed=run_json["seed"], devices_per_slot=run_json["devices_per_slot"],
                              max_retries=run_json.get("max_retries", 1),
                              trial_module=run_json.get("trial_module", LlmRunConfig.trial_module),
                              rehearsal=bool((run_json.get("config") or {}).get("rehearsal")))
        preset = llm_preset(config.preset)
        if preset.shards is not None:
            config.data = _resumed_shards(run_dir, preset, run_json)
        log = EventWriter(run_dir / "events.jsonl")  # drops a line cut short by the kill
        events = read_events(run_dir / "events.jsonl")
        if events[-1]["type"] == "run_finished":
            log.close()
            raise LlmRunError(f"{run_dir}: the run finished ({events[-1]['reason']}); there is nothing to resume")
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
        self = cls(run_dir, config, preset, run_json, log, search, hparams, say, trials=trials,
                   by_hash={t.proposal.arch_hash: t.trial for t in trials.values()},
                   started_at=events[0]["t"])
        self.records = sum(e["type"] == "train_end" for e in events)
        log.append("run_resumed", run_id=run_json["run_id"])
        if service is not None:
            self.witness = llmwitness.LlmWitness.resumed(service, events, log, self._figures, say)
        elif "token" in events[0]:
            say("this run is witnessed but no service is configured: it continues unwitnessed")
        for trial in trials.values():
            if trial.done:
                continue
            if trial.slot is not None:  # running when the controller died
                _kill_leftover(run_dir / "trials" / trial.trial / "attempt.pid")
                trial.slot = None
                self._failed(trial, "the controller stopped while it ran (resumed)")
            else:
                self.waiting.append(trial)
        return self

    # ---- the loop ---------------------------------------------------------------------------------

    def run(self) -> str:
        assert self.config.duration_s is not None
        deadline = self.started_at + self.config.duration_s  # counted from the run's start, across resumes
        reason = "duration"
        try:
            while time.time() < deadline:
                self._poll()
                self._fill()
                if self.witness is not None:
                    self.witness.tick()
                if self.exhausted and not self.running and not self.waiting:
                    reason = "exhausted"
                    break
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            reason = "stopped"
        self._poll()
        for trial in list(self.running.values()):
            self._stop(trial, "duration" if reason == "duration" else "stop")
        self.log.append("run_finished", reason=reason)
        if self.witness is not None:
            self.witness.finish()
        self.log.close()
        return reason

    def _figures(self) -> tuple[float, int, float | None]:
        finished = [t for t in self.trials.values() if t.loss is not None]
        return llmwitness.figures_of([t.loss for t in finished if t.loss is not None],
                                     float(sum(t.flops for t in finished)), self.records)

    def _fill(self) -> None:
        for slot in range(self.config.slots):
            if slot in self.running:
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

    def _launch(self, trial: _Trial, slot: int) -> None:
        trial.attempt += 1
        trial.slot, trial.copied = slot, 0
        trial_dir = self.run_dir / "trials" / trial.trial
        trial_dir.mkdir(parents=True, exist_ok=True)
        (trial_dir / "events.jsonl").unlink(missing_ok=True)  # an earlier attempt's log
        parent = self.trials[trial.parent] if trial.parent else None
        spec = {"trial": trial.trial, "attempt": trial.attempt, "preset": self.preset.name,
                "arch": trial.proposal.arch.to_dict(), "growths": list(trial.proposal.growths),
                "parent": parent.trial if parent else None,  # a sibling directory: no local path in the bundle
                "parent_arch": parent.proposal.arch.to_dict() if parent else None, "hparams": trial.hparams,
                "steps": self.preset.steps_per_trial, "seed": trial_seed(self.config.seed, trial.trial),
                "world": self.config.devices_per_slot}
        if self.preset.shards is not None:  # the trial refuses shards whose manifest is not the run's
            spec["data_digest"] = self.run_json["dataset"]["digest"]
        (trial_dir / "trial.json").write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
        threads = max(1, (os.cpu_count() or 1) // (self.config.slots * self.config.devices_per_slot))
        env = {**os.environ, "AIPERF_THREADS_PER_RANK": str(threads), "OMP_NUM_THREADS": str(threads)}
        with open(trial_dir / f"attempt-{trial.attempt}.out", "wb") as out:
            trial.process = subprocess.Popen([sys.executable, "-m", self.config.trial_module,
                                              str(trial_dir)], stdout=out, stderr=subprocess.STDOUT, env=env,
                                             start_new_session=True)
        (trial_dir / "attempt.pid").write_text(f"{trial.process.pid}\n")  # for a resume to stop it
        self.running[slot] = trial
        self.log.append("trial_started", trial=trial.trial, attempt=trial.attempt, slot=slot,
                        devices=self.config.devices_per_slot)

    def _poll(self) -> None:
        for slot, trial in list(self.running.items()):
            self._copy(trial)
            assert trial.process is not None
            rc = trial.process.poll()
            if rc is None:
                continue
            self._copy(trial)
            del self.running[slot]
            result = self._trial_lines(trial, "trial_result")
            if rc == 0 and result:
                self._finished(trial, result[-1])
            else:
                errors = self._trial_lines(trial, "trial_error")
                error = errors[-1]["error"] if errors else f"the trial program exited with status {rc}"
                self._failed(trial, error)

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
        self.say(f"{trial.trial} failed (attempt {trial.attempt}): {error}")
        if retry:
            self.waiting.appendleft(trial)
        else:
            trial.done = True
            self.hparams.tell(trial.trial, None)

    def _stop(self, trial: _Trial, reason: str) -> None:
        assert trial.process is not None
        try:
            os.killpg(trial.process.pid, signal.SIGTERM)
            trial.process.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(trial.process.pid, signal.SIGKILL)
            trial.process.wait()
        self.log.append("trial_cancelled", trial=trial.trial, attempt=trial.attempt, reason=reason)


def _device_type() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def _devices_per_slot(slots: int) -> int:
    """GPUs per slot with CUDA, else this machine's cores shared out (one process of one thread each)."""
    if _device_type() == "cuda":
        import torch

        return max(1, torch.cuda.device_count() // slots)
    return max(1, (os.cpu_count() or 1) // slots)


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


def _check_data(preset: LlmPreset) -> None:
    """Fail before the clock starts when the preset's text cannot be had here (rather than in every trial)."""
    from aiperf_runner.data.llmtext import KJV_NAME, TextError, kjv_text

    if preset.data == KJV_NAME:
        try:
            kjv_text()
        except TextError as exc:
            raise LlmRunError(f"{preset.name}: {exc}") from None


def _check_shards(preset: LlmPreset, data: str | None, say: Callable[[str], None]) -> dict[str, Any]:
    """run.json's `dataset` block: the preset's; for a shard preset with the facts of the manifest in `data`, which
    is verified here, before the clock starts (every shard re-hashed: the time is printed, not scored)."""
    if preset.shards is None:
        if data is not None:
            raise LlmRunError(f"{preset.name} makes its own text: --data is for the shard presets "
                              f"({', '.join(n for n, p in LLM_PRESETS.items() if p.shards is not None)})")
        return preset.to_json()
    from aiperf_runner.data import llmshards

    if data is None:
        raise LlmRunError(f"{preset.name} trains on token shards: give --data DIR, a directory of llm.c .bin shards "
                          f"with their manifest {llmshards.MANIFEST} (`aiperf-runner stage --workload llm`)")
    start = time.monotonic()
    try:
        manifest = llmshards.verify(data)
        dataset = llmshards.check_preset(manifest, preset)
    except llmshards.ShardError as exc:
        raise LlmRunError(f"{preset.name}: {exc}") from None
    say(f"data: {dataset['train_shards'] + dataset['val_shards']} shards, {dataset['train_tokens']:,} training and "
        f"{dataset['val_tokens']:,} validation tokens ({dataset['tokenizer']}), manifest {dataset['digest'][:16]}... "
        f"verified in {time.monotonic() - start:.1f} s (before the clock: not scored)")
    return dataset


def _resumed_shards(run_dir: Path, preset: LlmPreset, run_json: dict[str, Any]) -> str:
    """A resumed shard run's data directory (local/private.json), its manifest still the run's (read, not
    re-hashed: the clock runs; every trial checks the shards' headers and sizes)."""
    from aiperf_runner.data import llmshards

    data = read_private(run_dir).get("data")
    if not data:
        raise LlmRunError(f"{run_dir}: the run's shard directory is not recorded (local/private.json data)")
    try:
        manifest = llmshards.read_manifest(data)
    except llmshards.ShardError as exc:
        raise LlmRunError(f"{preset.name}: {exc}") from None
    if manifest["digest"] != (run_json.get("dataset") or {}).get("digest"):
        raise LlmRunError(f"{data}: its manifest is not the one this run verified (digest "
                          f"{manifest['digest'][:16]}...)")
    return str(data)


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


def _kill_leftover(pid_file: Path) -> None:
    """Stop an attempt the killed controller left running (its own process group)."""
    try:
        os.killpg(int(pid_file.read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass  # gone already, or never started
