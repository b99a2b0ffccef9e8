"""How much a preset's score moves between identical runs, as measured: what the list shows beside
a score, so that a reader knows which differences between results mean something.

Each entry is one configuration of `bench/reproducibility.py` (K runs of the same command on one
machine, one after the other): the coefficient of variation (standard deviation / mean) of the
score and of the regulated score. A result is shown the entry of its preset at the longest run
length not longer than its own (longer runs spread less), or the shortest one measured.
`docs/running.md` gives the same figures with the guidance for sites.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    preset: str
    duration_s: float
    slots: int
    runs: int
    score_cv: float
    regulated_cv: float
    machine: str  # where it was measured
    measured: str  # when (ISO date)

    def describe(self) -> str:
        minutes = self.duration_s / 60
        length = f"{minutes:g} min" if minutes < 60 else f"{minutes / 60:g} h"
        return (f"CV {self.score_cv:.1%} of the score, {self.regulated_cv:.1%} of the regulated score: "
                f"{self.runs} {self.preset} runs of {length} with {self.slots} slot{'s' if self.slots != 1 else ''} "
                f"on {self.machine} ({self.measured}, bench/reproducibility.py)")


TWO_CORES = "a 2-core x86 VM"

# Smoke's on the runner with its batch size fixed and its layers bounded (before those: CV 7.9 % at
# 5 minutes with TPE choosing the batch size); the 5-minute entry with its FLOPs bounded at 2x the
# seed's (under 3x: 2.6 % on 2 December, 7.1 % on 3 December, the search's path deciding the sizes).
MEASURED: tuple[Spread, ...] = (
    # bench/reproducibility.py --preset smoke --slots 1,2 --duration 2m --runs 4 (its 2-slot row)
    Spread("smoke", 120, slots=2, runs=4, score_cv=0.037, regulated_cv=0.041, machine=TWO_CORES,
           measured="2026-12-03"),
    # bench/reproducibility.py --preset smoke --slots 2 --duration 5m --runs 5
    Spread("smoke", 300, slots=2, runs=5, score_cv=0.037, regulated_cv=0.037, machine=TWO_CORES,
           measured="2026-12-03"),
    # bench/reproducibility.py --preset fashion-mnist --slots 2 --duration 30m --runs 3
    Spread("fashion-mnist", 1800, slots=2, runs=3, score_cv=0.038, regulated_cv=0.040, machine=TWO_CORES,
           measured="2026-12-03"),
)


def known_spread(preset: object, duration_s: object) -> Spread | None:
    """The measured spread that applies to a run of `preset` lasting `duration_s` seconds, or None
    when the preset's spread has not been measured."""
    entries = sorted((s for s in MEASURED if s.preset == preset), key=lambda s: s.duration_s)
    if not entries:
        return None
    if not isinstance(duration_s, int | float) or isinstance(duration_s, bool):
        return entries[0]
    shorter = [s for s in entries if s.duration_s <= float(duration_s) * 1.05]
    return shorter[-1] if shorter else entries[0]
