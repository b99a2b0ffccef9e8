"""`aiperf-runner status` and `aiperf-runner report`: where a run stands, and its summary."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer

from aiperf_runner.spec.errors import AiperfError


def status(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run directory (running or finished)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Where a run stands: running or not, time, slots, trials, best accuracy (an AIPerf-LLM run: best loss), score."""
    from aiperf_runner.run.progress import fmt_acc, fmt_duration, fmt_ops
    from aiperf_runner.run.report import llm_figures, run_status
    from aiperf_runner.run.state import load_scored, read_run_json
    from aiperf_runner.spec.llmrules import is_llm, score_ops

    try:
        run_json = read_run_json(run_dir)
        state, scored = load_scored(run_dir)
    except (OSError, ValueError) as exc:
        raise AiperfError(f"{run_dir}: {exc}") from None
    st, pid = run_status(state, run_dir)
    now = time.time()
    duration_s = float((run_json.get("config") or {}).get("duration_s") or 0)
    start = state.started_at
    end = state.finished_at if state.finished_at is not None else now
    elapsed = (end - start) if start is not None else 0.0
    llm = None
    if is_llm(run_json):  # its figures are tokens and losses as the rules count them (it has no epochs, no accuracy)
        llm = llm_figures(Path(run_dir), run_json)
        score = score_ops(llm["flops"], elapsed) if elapsed > 0 and llm["flops"] is not None else None
    else:
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
    if llm is not None:
        info.update({"workload": "llm", "epochs": None, "best_accuracy": None, "best_loss": llm["best_loss"],
                     "tokens_trained": llm["tokens_trained"]})
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
    trained = f"{info['epochs']} epochs" if llm is None else f"{info['tokens_trained']:,} tokens"
    typer.echo(f"trials    {info['trials_finished']} finished, {info['trials_failed']} failed, "
               f"{info['trials_cancelled']} cancelled, {len(state.trials)} proposed; {trained}")
    if llm is None:
        typer.echo(f"accuracy  {fmt_acc(info['best_accuracy'])} best")
    else:
        loss = info["best_loss"]
        typer.echo(f"loss      {'-' if loss is None else f'{loss:.4f} nats'} best (validation)")
    typer.echo(f"score     {fmt_ops(score)}")
    util = info["slot_utilisation"]
    typer.echo(f"slot use  {'-' if util is None else f'{util:.1%}'}")
    for r in running:  # an AIPerf-LLM trial trains a number of steps, not epochs
        progress = f"epoch {r['epochs']}/{r['budget']}, " if llm is None else ""
        typer.echo(f"  slot {r['slot']}: {r['trial']} attempt {r['attempt']}, {progress}{fmt_duration(r['seconds'])}")


def report(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run directory."),
    html_path: Path = typer.Option(None, "--html", metavar="FILE", help="Write a self-contained HTML report."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object."),
) -> None:
    """Summary of a run (terminal, --json) and an HTML report with charts (--html)."""
    from aiperf_runner.run.report import print_summary, public, summarize, write_html

    try:
        summary = summarize(run_dir)
    except (OSError, ValueError) as exc:
        raise AiperfError(f"{run_dir}: {exc}") from None
    if html_path is not None:
        write_html(summary, html_path)
        if not as_json:
            typer.echo(f"HTML report written to {html_path}")
    if as_json:
        typer.echo(json.dumps(public(summary), sort_keys=True, default=str))
        return
    print_summary(summary)


def register(app: typer.Typer) -> None:
    app.command("status")(status)
    app.command("report")(report)
