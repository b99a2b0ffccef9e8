"""`aiperf-runner run`, `status` and `report`.

Exit status of `run`: 0 when the run finished (at its duration, because the search ran out of
candidates, or stopped by Ctrl-C / SIGTERM: the log is complete in every case); 1 when it could
not start or resume, or the controller itself failed (the log is then closed with
`run_finished` reason "stopped" and an `error`).
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import typer

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """'5m' -> 300.0; '90s', '1.5h', '300' (seconds) also work."""
    m = DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise typer.BadParameter(f"{text!r}: expected a positive duration like 90s, 5m, 1h")
    return float(m.group(1)) * UNITS[m.group(2).lower()]


def parse_options(items: list[str] | None, what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{what} {item!r}: expected KEY=VALUE")
        try:
            out[key.replace("-", "_")] = json.loads(value)
        except ValueError:
            out[key.replace("-", "_")] = value
    return out


def run(
    preset: str = typer.Option("smoke", "--preset", help="smoke (generated data, minutes on a CPU), cifar or "
                                                          "imagenet (the official workload; needs --data)."),
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
    precision: str = typer.Option("fp32", "--precision", help="fp32, tf32, bf16 or fp16 (autocast)."),
    data: str = typer.Option(None, "--data", help="ImageFolder directory with train/ and val/ (cifar, imagenet)."),
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
                                    "needs the service `register` saved, or --server/--token."),
    offline: bool = typer.Option(False, "--offline", help="Run without the service: unwitnessed, so the result "
                                                          "can only enter the open division."),
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
    progress: str = typer.Option("auto", "--progress", help="auto (live on a terminal), live, plain or none."),
    trial_module: str = typer.Option("aiperf_runner.train.trial", "--trial-module", hidden=True,
                                     help="Module run as the trial program (tests use a fake one)."),
) -> None:
    """Run the AIPerf benchmark: architecture + hyper-parameter search, trials on every slot."""
    from aiperf_runner.controller import Controller, ControllerError, RunConfig
    from aiperf_runner.presets import PresetError, get_preset
    from aiperf_runner.progress import make_progress
    from aiperf_runner.service import Failure, find_service, resolve_system
    from aiperf_runner.sysinfo import parse_peak_overrides

    display = make_progress(progress)
    try:
        if resume is not None:
            service = None if offline else find_service(server, token, required=False)
            controller = Controller.resume(resume, progress=display, service=service)
        else:
            p = get_preset(preset)
            duration_s = parse_duration(duration) if duration else p.default_duration_s
            run_dir = out or Path("runs") / f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"
            options = parse_options(backend_opt, "--backend-opt")
            named = {"partition": partition, "account": account, "reservation": reservation, "qos": qos,
                     "constraint": constraint, "prologue": str(prologue) if prologue else None, "wrap": wrap,
                     "rdzv_iface": rdzv_iface,
                     "nodes_per_slot": nodes_per_slot, "gpus_per_node": gpus_per_node,
                     "time_limit": time_limit}
            options.update({k: v for k, v in named.items() if v is not None})
            config = RunConfig(preset=preset, slots=slots,
                               duration_s=duration_s, backend=backend, devices_per_slot=devices_per_slot,
                               precision=precision, data=data, stage_data=stage_data, seed=seed, max_retries=max_retries,
                               backend_options=options, trial_module=trial_module,
                               system_name=system_name.strip(), interconnect=interconnect.strip(),
                               publish_hostnames=publish_hostnames, lr_scaling=lr_scaling,
                               lr_reference_batch=lr_reference_batch, lr_warmup_epochs=lr_warmup_epochs,
                               cpu_bind=not no_cpu_bind)
            registration = service = None
            if system is not None:
                if offline:
                    raise ValueError("--system names a registered system of the service; --offline runs without it")
                service = find_service(server, token)
                assert service is not None
                registration = resolve_system(service, system)
            controller = Controller.create(config, run_dir, peak_overrides=parse_peak_overrides(peak_flops),
                                           progress=display, registration=registration, service=service)
    except (ControllerError, PresetError, ValueError, OSError, Failure) as exc:
        if display is not None:
            display.close()
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        if display is not None:
            display.close()
        typer.echo("interrupted while starting", err=True)
        raise typer.Exit(130) from None

    stops = {"n": 0}

    def on_signal(signum: int, frame: Any) -> None:
        stops["n"] += 1
        if stops["n"] > 1 and signum == signal.SIGINT:
            raise KeyboardInterrupt
        controller.request_stop("stopped")

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    run_dir = controller.run_dir
    verb = "resumed" if resume is not None else "started"
    typer.echo(f"run {controller.run_json['run_id']} {verb} in {run_dir} "
               f"({controller.config.preset}, {len(controller.slots)} slots, backend {controller.config.backend})")
    try:
        reason = controller.run()
    except KeyboardInterrupt:
        typer.echo("interrupted: running trials cancelled, the log closed", err=True)
        raise typer.Exit(130) from None
    except Exception as exc:  # noqa: BLE001
        typer.echo(f"error: the controller failed: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    from aiperf_runner.report import print_summary, summarize

    typer.echo(f"run finished ({reason}); verify it with: aiperf-runner verify {run_dir}")
    print_summary(summarize(run_dir))


def status(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run directory (running or finished)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Where a run stands: running or not, time, slots, trials, best accuracy, score."""
    from aiperf_runner.progress import fmt_acc, fmt_duration, fmt_ops
    from aiperf_runner.report import run_status
    from aiperf_runner.runstate import load_scored, read_run_json

    try:
        run_json = read_run_json(run_dir)
        state, scored = load_scored(run_dir)
    except (OSError, ValueError) as exc:
        typer.echo(f"error: {run_dir}: {exc}", err=True)
        raise typer.Exit(1) from None
    st, pid = run_status(state, run_dir)
    now = time.time()
    duration_s = float((run_json.get("config") or {}).get("duration_s") or 0)
    start = state.started_at
    end = state.finished_at if state.finished_at is not None else now
    elapsed = (end - start) if start is not None else 0.0
    try:
        score = scored.series().score if scored is not None else None
    except Exception:  # noqa: BLE001
        score = None
    running: list[dict[str, Any]] = [{"trial": a.trial, "attempt": a.attempt, "slot": a.slot, "seconds": now - a.started,
                "epochs": state.trials[a.trial].epochs_counted, "budget": state.trials[a.trial].epoch_budget}
               for a in state.running()] if st == "running" else []
    info: dict[str, Any] = {
        "run_id": run_json.get("run_id"), "preset": run_json.get("preset"), "status": st, "controller_pid": pid,
        "finish_reason": state.finish_reason, "elapsed_s": elapsed, "duration_s": duration_s,
        "remaining_s": max(0.0, start + duration_s - now) if start and st == "running" else 0.0,
        "slots": state.slots, "slots_busy": len(running), "running": running,
        "trials_proposed": len(state.trials), "trials_finished": state.count("finished"),
        "trials_failed": state.count("failed"), "trials_cancelled": state.count("cancelled"),
        "epochs": state.epoch_lines, "best_accuracy": state.best_accuracy(), "score_ops": score,
        "slot_utilisation": state.slot_utilisation(end),
    }
    if as_json:
        typer.echo(json.dumps(info, sort_keys=True))
        return
    line = {"running": f"running (controller pid {pid})", "finished": f"finished ({state.finish_reason})",
            "interrupted": f"interrupted: no controller is running it; continue with "
                           f"`aiperf-runner run --resume {run_dir}`",
            "starting": "starting"}[st]
    typer.echo(f"run {info['run_id']} ({info['preset']}): {line}")
    typer.echo(f"time      {fmt_duration(elapsed)} of {fmt_duration(duration_s)}"
               + (f", {fmt_duration(info['remaining_s'])} left" if st == "running" else ""))
    typer.echo(f"slots     {len(running)}/{state.slots} busy" if st == "running" else f"slots     {state.slots}")
    typer.echo(f"trials    {info['trials_finished']} finished, {info['trials_failed']} failed, "
               f"{info['trials_cancelled']} cancelled, {len(state.trials)} proposed; {info['epochs']} epochs")
    typer.echo(f"accuracy  {fmt_acc(info['best_accuracy'])} best")
    typer.echo(f"score     {fmt_ops(score)}")
    util = info["slot_utilisation"]
    typer.echo(f"slot use  {'-' if util is None else f'{util:.1%}'}")
    for r in running:
        typer.echo(f"  slot {r['slot']}: {r['trial']} attempt {r['attempt']}, epoch {r['epochs']}/{r['budget']}, "
                   f"{fmt_duration(r['seconds'])}")


def report(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run directory."),
    html_path: Path = typer.Option(None, "--html", metavar="FILE", help="Write a self-contained HTML report."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object."),
) -> None:
    """Summary of a run (terminal, --json) and an HTML report with charts (--html)."""
    from aiperf_runner.report import print_summary, public, summarize, write_html

    try:
        summary = summarize(run_dir)
    except (OSError, ValueError) as exc:
        typer.echo(f"error: {run_dir}: {exc}", err=True)
        raise typer.Exit(1) from None
    if html_path is not None:
        write_html(summary, html_path)
        if not as_json:
            typer.echo(f"HTML report written to {html_path}")
    if as_json:
        typer.echo(json.dumps(public(summary), sort_keys=True, default=str))
        return
    print_summary(summary)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("status")(status)
    app.command("report")(report)

