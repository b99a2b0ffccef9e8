"""`aiperf-runner run`: the benchmark, from its options to the end of the controller.

Exit status: 0 when the run finished (at its duration, because the search ran out of candidates,
or stopped by Ctrl-C / SIGTERM: the log is complete in every case); 1 when it could not start or
resume, or the controller itself failed (the log is then closed with `run_finished` reason
"stopped" and an `error`); 130 when interrupted while starting, or by a second Ctrl-C.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from aiperf_runner.cli.exitcodes import INTERRUPTED
from aiperf_runner.cli.options import parse_duration, parse_options
from aiperf_runner.spec.errors import AiperfError

TRIAL_MODULE = "aiperf_runner.train.trial"  # the image trial program; an LLM run's default is its own

if TYPE_CHECKING:
    from aiperf_runner.client.service import Service
    from aiperf_runner.run.controller import Controller, RunConfig
    from aiperf_runner.run.llmrun import LlmRun


def run(
    workload: str = typer.Option("image", "--workload", help="image (the AIPerf benchmark: CNNs on images) or llm "
                                                              "(AIPerf-LLM: transformer language models; presets "
                                                              "llm-smoke, llm-kjv, llm, llm-bytes)."),
    preset: str = typer.Option(None, "--preset", help="smoke (generated data, minutes on a CPU; the default), "
                                                       "cifar or imagenet (the official workload; needs --data); "
                                                       "with --workload llm: llm-smoke (the default), llm-kjv "
                                                       "(real text: Debian's bible-kjv), llm (GPU clusters: "
                                                       "GPT-2-tokenised web text as llm.c shards, --data) or "
                                                       "llm-bytes (the same path on byte-level shards of any "
                                                       "text, --data: a CPU try)."),
    slots: int = typer.Option(None, "--slots", min=1, help="Trials run at once (default: 1 with local, which splits "
                                                           "this machine's devices; the nodes available with slurm)."),
    duration: str = typer.Option(None, "--duration", help="Run length, e.g. 5m, 1h (default: the preset's). "
                                                          "Counted from the run's start, also across --resume."),
    out: Path = typer.Option(None, "--out", help="Run directory to create (default runs/<preset>-<time>)."),
    backend: str = typer.Option("local", "--backend", help="Where trials run: local, slurm (a job per trial), "
                                                           "slurm-steps (inside one allocation: a job step per "
                                                           "trial), or an installed plugin."),
    devices_per_slot: int = typer.Option(0, "--devices-per-slot", min=0, show_default=False,
                                         help="Devices (DDP processes) per slot: GPUs with CUDA (default 1), "
                                              "processes of one thread each on CPU (default: the cores shared "
                                              "out between the slots, so that one slot uses the whole machine)."),
    precision: str = typer.Option("auto", "--precision", help="auto (bf16 for the imagenet preset on GPUs, else "
                                                                 "fp32), fp32, tf32, bf16 or fp16 (autocast)."),
    data: str = typer.Option(None, "--data", help="ImageFolder directory with train/ and val/ (cifar, imagenet). "
                                                   "--workload llm, presets llm and llm-bytes: the directory of "
                                                   "the token shards and their manifest (`stage --workload "
                                                   "llm`), verified before the clock starts."),
    data_manifest: str = typer.Option(None, "--data-manifest", metavar="FILE",
                                      help="A pack's manifest (stage --manifest-to) where this machine reads "
                                           "it, when --data is a pack on the compute nodes' own disks."),
    stage_data: str = typer.Option(None, "--stage-data", metavar="DIR",
                                   help="Copy --data to this node-local directory on each trial's node(s) (once, "
                                        "checked against the run's manifest; %n: the node's name) and train from "
                                        "the copy."),
    seed: int = typer.Option(0, "--seed", help="Seed of the searches and the trials."),
    peak_flops: list[str] = typer.Option(None, "--peak-flops", metavar="PRECISION=FLOPS",
                                         help="Declare the system's peak FLOP/s at a precision (repeatable), "
                                              "overriding the built-in table, e.g. fp32=1.9e13."),
    max_retries: int = typer.Option(2, "--max-retries", min=0, help="Retries of a failed trial before it is "
                                                                     "recorded as failed."),
    resume: Path = typer.Option(None, "--resume", metavar="RUN_DIR",
                                help="Continue a run whose controller was killed (options come from its run.json)."),
    backend_opt: list[str] = typer.Option(None, "--backend-opt", metavar="KEY=VALUE",
                                          help="Option passed to the backend (repeatable)."),
    partition: str = typer.Option(None, "--partition", help="slurm: the partition to submit to."),
    account: str = typer.Option(None, "--account", help="slurm: the account to charge."),
    reservation: str = typer.Option(None, "--reservation", help="slurm: run every job (and count slots) inside this "
                                                                 "reservation."),
    qos: str = typer.Option(None, "--qos", help="slurm: the QOS of every job."),
    constraint: str = typer.Option(None, "--constraint", help="slurm: node features every job needs, e.g. a100 or "
                                                               "'a100&ib' (slots count only nodes that have them)."),
    prologue: Path = typer.Option(None, "--prologue", metavar="FILE",
                                  help="slurm: shell snippet sourced on each trial's nodes before it starts "
                                       "(modules, staging, NCCL variables); kept in the run directory."),
    wrap: str = typer.Option(None, "--wrap", metavar="'CMD PREFIX'",
                             help="slurm: command prefix of the trial processes, e.g. 'apptainer exec --nv IMAGE'."),
    rdzv_iface: str = typer.Option(None, "--rdzv-iface", metavar="IFACE",
                                   help="slurm: a multi-node trial's rendezvous at this network interface's address "
                                        "on its first node (e.g. ib0) instead of the node's NodeAddr."),
    nodes_per_slot: int = typer.Option(None, "--nodes-per-slot", min=1,
                                       help="slurm: nodes per trial (DDP across them; default 1)."),
    gpus_per_node: int = typer.Option(None, "--gpus-per-node", min=0, help="slurm: GPUs per node to request."),
    time_limit: str = typer.Option(None, "--time-limit", help="slurm: time limit of each trial's job, e.g. 2:00:00."),
    system: str = typer.Option(None, "--system", metavar="ID_OR_NAME",
                               help="The registered system this run is judged by (`aiperf-runner system add`). "
                                    "The run is witnessed by the service (run token, heartbeats, receipts); "
                                    "needs the service `register` saved, or --server/--token. Both workloads."),
    offline: bool = typer.Option(False, "--offline", help="Run without the service: unwitnessed, so the result "
                                                          "can only enter the open division."),
    rehearsal: bool = typer.Option(False, "--rehearsal",
                                   help="A rehearsal of an official run (needs --system): witnessed on a rehearsal "
                                        "token, verified like an official run when submitted with `submit "
                                        "--rehearsal`, shown to this site only; never ranked, never official, and "
                                        "counted apart from the system's runs."),
    server: str = typer.Option(None, "--server", help="The AIPerf service (default: $AIPERF_SERVER, else what "
                                                      "`register` saved)."),
    token: str = typer.Option(None, "--token", help="The site's API token (default: $AIPERF_TOKEN, else what "
                                                    "`register` saved)."),
    system_name: str = typer.Option("", "--system-name", metavar="NAME",
                                    help="The system's name on the list (run.json system.name), e.g. 'Tsubame 4'."),
    interconnect: str = typer.Option("", "--interconnect", metavar="TEXT",
                                     help="The nodes' interconnect as the list shows it, e.g. 'InfiniBand NDR 400'."),
    publish_hostnames: bool = typer.Option(False, "--publish-hostnames",
                                           help="Log node names as they are. By default the published log names "
                                                "nodes by pseudonyms keyed with the site secret (docs/log-format.md)."),
    lr_scaling: str = typer.Option("linear", "--lr-scaling",
                                   help="The trials' learning rate: linear (lr x global batch / reference batch, "
                                        "Goyal et al.) or none (lr as the search proposed it, on any number of "
                                        "devices)."),
    lr_reference_batch: int = typer.Option(0, "--lr-reference-batch", min=0, metavar="IMAGES",
                                           help="The batch the searched lr is the rate of (0: the per-device "
                                                "batch, so the rate is multiplied by the number of devices)."),
    lr_warmup_epochs: float = typer.Option(None, "--lr-warmup-epochs", min=0.0, metavar="EPOCHS",
                                           help="Linear warm-up of the learning rate (default: 1 epoch, 5 when "
                                                "scaled up; at most a tenth of a trial's epoch budget)."),
    no_cpu_bind: bool = typer.Option(False, "--no-cpu-bind",
                                     help="Do not pin each training process and its data-loader workers to the "
                                          "cores of its GPU's NUMA node (CPU: an even share of the cores)."),
    keep_states: bool = typer.Option(False, "--keep-states",
                                     help="Keep every training state the trials commit (trials/*/states/), to "
                                          "re-execute their segments yourself (python -m aiperf_runner.train."
                                          "segment). A witnessed run keeps those its audit may ask for anyway."),
    progress: str = typer.Option("auto", "--progress", help="auto (live on a terminal), live, plain or none."),
    trial_module: str = typer.Option(TRIAL_MODULE, "--trial-module", hidden=True,
                                     help="Module run as the trial program (tests use a fake one)."),
) -> None:
    """Run the AIPerf benchmark: architecture + hyper-parameter search, trials on every slot."""
    from aiperf_runner.run.controller import RunConfig
    from aiperf_runner.run.progress import make_progress

    options = _backend_options(backend_opt, {
        "partition": partition, "account": account, "reservation": reservation, "qos": qos,
        "constraint": constraint, "prologue": str(prologue) if prologue else None, "wrap": wrap,
        "rdzv_iface": rdzv_iface, "nodes_per_slot": nodes_per_slot, "gpus_per_node": gpus_per_node,
        "time_limit": time_limit})
    if workload == "llm" or (resume is not None and _is_llm_run(resume)):
        registration, service = _registration(system, offline, server, token) if resume is None else (None, None)
        if resume is not None and not offline:
            from aiperf_runner.client.service import find_service

            service = find_service(server, token, required=False)
        _run_llm(preset or "llm-smoke", slots, duration, out, seed, devices_per_slot, max_retries, resume,
                 service, registration, trial_module if trial_module != TRIAL_MODULE else None, data,
                 rehearsal=rehearsal, backend=backend, backend_options=options, progress=progress)
        return
    if workload != "image":
        raise AiperfError(f"unknown --workload {workload!r}: image or llm")
    preset = preset or "smoke"
    display = make_progress(progress)
    with _closing_display_on_failure(display):
        if resume is not None:
            controller = _resume(resume, display, offline, server, token)
        else:
            duration_s = _duration_s(preset, duration)
            run_dir = out or Path("runs") / f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"
            config = RunConfig(preset=preset, slots=slots,
                               duration_s=duration_s, backend=backend, devices_per_slot=devices_per_slot,
                               precision=precision, data=data, data_manifest=data_manifest, stage_data=stage_data, seed=seed, max_retries=max_retries,
                               backend_options=options, trial_module=trial_module,
                               system_name=system_name.strip(), interconnect=interconnect.strip(),
                               publish_hostnames=publish_hostnames, lr_scaling=lr_scaling,
                               lr_reference_batch=lr_reference_batch, lr_warmup_epochs=lr_warmup_epochs,
                               cpu_bind=not no_cpu_bind, rehearsal=rehearsal, keep_states=keep_states)
            controller = _create(config, run_dir, peak_flops, display, system, offline, server, token)
    with _stop_on_signals(controller):
        _announce(controller, resumed=resume is not None)
        reason = _drive(controller)
    _print_result(controller.run_dir, reason)


@contextmanager
def _closing_display_on_failure(display: Any) -> Iterator[None]:
    """A run that cannot start or resume closes the live display before its error is printed."""
    try:
        yield
    except (AiperfError, ValueError, OSError) as exc:
        _close(display)
        raise AiperfError(str(exc)) from None
    except KeyboardInterrupt:
        _close(display)
        typer.echo("interrupted while starting", err=True)
        raise typer.Exit(INTERRUPTED) from None


def _close(display: Any) -> None:
    if display is not None:
        display.close()


def _duration_s(preset: str, duration: str | None) -> float:
    """--duration, else the preset's own (an unknown preset is reported before a bad duration)."""
    from aiperf_runner.data.presets import get_preset

    p = get_preset(preset)
    return parse_duration(duration) if duration else p.default_duration_s


def _backend_options(items: list[str] | None, named: dict[str, Any]) -> dict[str, Any]:
    """--backend-opt KEY=VALUE items, with the backend options that have an option of their own on top."""
    options = parse_options(items, "--backend-opt")
    options.update({k: v for k, v in named.items() if v is not None})
    return options


def _resume(run_dir: Path, display: Any, offline: bool, server: str | None, token: str | None) -> Controller:
    from aiperf_runner.client.service import find_service
    from aiperf_runner.run.controller import Controller

    service = None if offline else find_service(server, token, required=False)
    return Controller.resume(run_dir, progress=display, service=service)


def _create(config: RunConfig, run_dir: Path, peak_flops: list[str] | None, display: Any, system: str | None,
            offline: bool, server: str | None, token: str | None) -> Controller:
    from aiperf_runner.run.controller import Controller
    from aiperf_runner.util.sysinfo import parse_peak_overrides

    if config.rehearsal and system is None:
        raise ValueError("--rehearsal needs --system: a rehearsal is witnessed by the service like an official run")
    registration, service = _registration(system, offline, server, token)
    return Controller.create(config, run_dir, peak_overrides=parse_peak_overrides(peak_flops),
                             progress=display, registration=registration, service=service)


def _registration(system: str | None, offline: bool, server: str | None,
                  token: str | None) -> tuple[dict[str, Any] | None, Service | None]:
    """The registered system the run is judged by, and the service that witnesses it (none without --system)."""
    from aiperf_runner.client.service import find_service, resolve_system

    if system is None:
        return None, None
    if offline:
        raise ValueError("--system names a registered system of the service; --offline runs without it")
    service = find_service(server, token)
    assert service is not None
    return resolve_system(service, system), service


@contextmanager
def _stop_on_signals(controller: Controller | LlmRun) -> Iterator[None]:
    """Ctrl-C or SIGTERM asks the controller to stop (it closes the log in order); a second Ctrl-C interrupts."""
    stops = 0

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stops
        stops += 1
        if stops > 1 and signum == signal.SIGINT:
            raise KeyboardInterrupt
        controller.request_stop("stopped")

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _announce(controller: Controller, resumed: bool) -> None:
    verb = "resumed" if resumed else "started"
    typer.echo(f"run {controller.run_json['run_id']} {verb} in {controller.run_dir} "
               f"({controller.config.preset}, {len(controller.slots)} slots, backend {controller.config.backend})")


def _drive(controller: Controller) -> str:
    """The controller run to its end; the reason it gives."""
    try:
        return controller.run()
    except KeyboardInterrupt:
        typer.echo("interrupted: running trials cancelled, the log closed", err=True)
        raise typer.Exit(INTERRUPTED) from None
    except Exception as exc:  # noqa: BLE001
        raise AiperfError(f"the controller failed: {type(exc).__name__}: {exc}") from None


def _print_result(run_dir: Path, reason: str) -> None:
    from aiperf_runner.run.report import print_summary, summarize

    typer.echo(f"run finished ({reason}); verify it with: aiperf-runner verify {run_dir}")
    print_summary(summarize(run_dir))


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def _is_llm_run(run_dir: Path) -> bool:
    import json

    from aiperf_runner.spec.llmrules import is_llm

    try:
        return is_llm(json.loads((run_dir / "run.json").read_text()))
    except (OSError, ValueError):
        return False  # the image controller's resume says what is wrong with it


def _run_llm(preset: str, slots: int | None, duration: str | None, out: Path | None, seed: int,
             devices_per_slot: int, max_retries: int, resume: Path | None, service: Service | None,
             registration: dict[str, Any] | None, trial_module: str | None = None, data: str | None = None,
             rehearsal: bool = False, backend: str = "local", backend_options: dict[str, Any] | None = None,
             progress: str = "plain") -> None:
    """`run --workload llm` (or `--resume` of an LLM run): the AIPerf-LLM run (run/llmrun.py), its trials on
    `backend` (local: this machine; slurm: a job per attempt) with `backend_options`, witnessed by `service` when
    `--system` names a `registration`; `data`: a shard preset's shards (`--data`). A resume takes its backend
    from the run's run.json."""
    from aiperf_runner.run.llmrun import summary
    from aiperf_runner.run.progress import make_progress

    display = make_progress(progress)
    say = display.note if display is not None else (lambda _message: None)
    with _closing_display_on_failure(display):
        llm = _start_llm(preset, slots, duration, out, seed, devices_per_slot, max_retries, resume, service,
                         registration, trial_module, data, rehearsal, backend, backend_options, say)
    llm.progress = display
    config, run_dir = llm.config, llm.run_dir
    if llm.witness is not None:
        typer.echo(f"witnessed by {llm.witness.witnessing.service.server} (registered system "
                   f"{llm.run_json['system']['id']}): the service issued this run's id and token")
    typer.echo(f"AIPerf-LLM run {llm.run_json['run_id']}: preset {config.preset}, {config.slots} slot(s) of "
               f"{config.devices_per_slot} process(es), {config.duration_s:.0f} s, backend {config.backend}, "
               f"in {run_dir}")
    # SIGTERM (a scheduler's stop) ends the run as Ctrl-C does: trials stopped, the log closed in order
    with _stop_on_signals(llm):
        reason = llm.run()
    done = summary(run_dir)
    best = f"{done['best_loss']:.4f}" if done["best_loss"] is not None else "-"
    typer.echo(f"finished ({reason}): {done['trials_finished']} trials, {done['tokens']:,} tokens, "
               f"{done['flops']:.4g} FLOPs trained, best validation loss {best} nats; morphisms used: "
               f"{', '.join(done['morphisms']) or 'none'}")
    typer.echo(f"verify it: aiperf-runner verify {run_dir}")
    if config.rehearsal:
        typer.echo(f"a rehearsal, never ranked: `aiperf-runner submit --rehearsal {run_dir}` has it verified and "
                   "audited for this site only")


def _start_llm(preset: str, slots: int | None, duration: str | None, out: Path | None, seed: int,
               devices_per_slot: int, max_retries: int, resume: Path | None, service: Service | None,
               registration: dict[str, Any] | None, trial_module: str | None, data: str | None, rehearsal: bool,
               backend: str, backend_options: dict[str, Any] | None, say: Callable[[str], None]) -> Any:
    """The AIPerf-LLM run created, or resumed from `resume`."""
    from aiperf_runner.run.llmrun import LlmRun, LlmRunConfig

    if resume is not None:
        llm = LlmRun.resume(resume, say=say, service=service)
        typer.echo(f"AIPerf-LLM run {llm.run_json['run_id']} resumed: {len(llm.trials)} trials so far")
        return llm
    # No --slots: one on this machine (it gets every core or GPU); the backend's own default elsewhere
    # (slurm: as many as the partition's usable nodes hold).
    config = LlmRunConfig(preset=preset, slots=slots or (1 if backend == "local" else 0), seed=seed,
                          devices_per_slot=devices_per_slot, max_retries=max_retries, data=data,
                          duration_s=parse_duration(duration) if duration else None, rehearsal=rehearsal,
                          backend=backend, backend_options=dict(backend_options or {}))
    if trial_module:
        config.trial_module = trial_module
    run_dir = out or Path("runs") / f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    return LlmRun.create(config, run_dir, say=say, service=service, registration=registration)
