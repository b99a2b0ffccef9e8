"""A forged trial program: the real one, but every accuracy it logs is raised by 0.05 (capped at 1).

    python -m tests.service.inflated_trial TRIAL_DIR --attempt N

What a site would get by editing its log's accuracies and re-signing it, made at the source so
that everything else (chain, signature, weights and their digest) is honest. The audit's
re-evaluation of the kept weights must catch it (`audit.accuracy`).
"""

from __future__ import annotations

import torch
from aiperf_runner.train import trial

RAISE = 0.05
_evaluate = trial.evaluate


def inflated(*args, **kwargs) -> torch.Tensor:  # type: ignore[no-untyped-def]
    totals = _evaluate(*args, **kwargs)  # [images, correct, loss sum]
    totals[1] = torch.clamp(totals[1] + RAISE * totals[0], max=totals[0])
    return totals


trial.evaluate = inflated

if __name__ == "__main__":
    trial._exit_now(trial.main())
