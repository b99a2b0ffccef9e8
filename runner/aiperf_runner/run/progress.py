"""Progress of a run: a live rich display on a terminal, plain log lines otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, Any

Snapshot = Callable[[], dict[str, Any]]


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def fmt_ops(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}OPS"
    return f"{value:.3g} OPS"


def fmt_acc(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def fmt_loss(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f} nats"


def _best(snap: dict[str, Any]) -> tuple[str, str]:
    """(label, value) of the run's best model: validation accuracy, or an AIPerf-LLM run's validation loss."""
    if "best_loss" in snap:
        return "best loss", fmt_loss(snap["best_loss"])
    return "best accuracy", fmt_acc(snap["best_accuracy"])


def status_line(snap: dict[str, Any]) -> str:
    label, best = _best(snap)
    epochs = f", {snap['epochs']} epochs" if "epochs" in snap else ""
    return (f"[{fmt_duration(snap['elapsed_s'])} / {fmt_duration(snap['duration_s'])}] "
            f"slots {snap['slots_busy']}/{snap['slots']} busy | trials {snap['trials_finished']} finished, "
            f"{snap['trials_failed']} failed{epochs} | {label} {best} | score {fmt_ops(snap['score_ops'])}")


class PlainProgress:
    """One line per notable event, and a status line every `interval_s`."""

    def __init__(self, stream: IO[str] | None = None, interval_s: float = 30.0) -> None:
        self.stream = stream or sys.stdout
        self.interval_s = interval_s
        self._last = 0.0

    def _print(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} {text}", file=self.stream, flush=True)

    def note(self, message: str) -> None:
        self._print(message)

    def update(self, snapshot: Snapshot, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last >= self.interval_s:
            self._last = now
            self._print(status_line(snapshot()))

    def close(self) -> None:
        pass


class LiveProgress:
    """A rich Live panel: elapsed and remaining time, slots, trials, best accuracy, current score."""

    def __init__(self, refresh_s: float = 0.5) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console()
        self.refresh_s = refresh_s
        self._last = 0.0
        self._notes: list[str] = []
        self._live = Live(console=self.console, refresh_per_second=4, transient=False)
        self._live.start()

    def note(self, message: str) -> None:
        self._live.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {message}", highlight=False)

    def update(self, snapshot: Snapshot, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.refresh_s:
            return
        self._last = now
        self._live.update(self.render(snapshot()))

    @staticmethod
    def render(snap: dict[str, Any]) -> Any:
        from rich.panel import Panel
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        llm = "best_loss" in snap  # an AIPerf-LLM run's: losses and growths, no accuracy or epochs
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        total = max(snap["duration_s"], 1e-9)
        bar = ProgressBar(total=total, completed=min(snap["elapsed_s"], total), width=40)
        grid.add_row("elapsed", f"{fmt_duration(snap['elapsed_s'])}  (remaining {fmt_duration(snap['remaining_s'])})")
        grid.add_row("", bar)
        grid.add_row("slots", f"{snap['slots_busy']}/{snap['slots']} busy")
        epochs = f", {snap['epochs']} epochs" if "epochs" in snap else ""
        grid.add_row("trials", f"{snap['trials_finished']} finished, {snap['trials_failed']} failed, "
                               f"{snap['trials_proposed']} proposed{epochs}")
        grid.add_row(*_best(snap))
        grid.add_row("score", fmt_ops(snap["score_ops"]))
        if snap["running"]:
            running = Table(box=None, padding=(0, 1), show_header=True, header_style="dim")
            for col in ("slot", "trial", "attempt", "growth" if llm else "epochs"):
                running.add_column(col)
            for r in snap["running"]:
                running.add_row(str(r["slot"]), r["trial"], str(r["attempt"]),
                                r["growth"] if llm else f"{r['epochs']}/{r['budget']}")
            grid.add_row("running", running)
        title = f"AIPerf{'-LLM' if llm else ''} {snap['preset']} run {snap['run_id'][:8]}"
        if snap.get("finished"):
            title += f" — finished ({snap['finish_reason']})"
        return Panel(grid, title=title, expand=False)

    def close(self) -> None:
        self._live.stop()


def make_progress(mode: str = "auto", interval_s: float = 30.0) -> PlainProgress | LiveProgress | None:
    """`auto`: live display on a terminal, plain lines otherwise; `plain`, `live` or `none`."""
    if mode == "none":
        return None
    if mode == "live" or (mode == "auto" and sys.stdout.isatty()):
        return LiveProgress()
    return PlainProgress(interval_s=interval_s)
