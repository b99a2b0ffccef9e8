"""A forged trial program: the real one, but it logs 0.99 accuracy for its first epoch.

    python -m tests.service.lucky_epoch_trial TRIAL_DIR --attempt N

The red team's "a non-final epoch at 0.99" attack, made at the source: the final weights and their
accuracy are honest (the kept weights re-evaluate to what the last epoch says), and the run's best
accuracy comes from an epoch the weights audit never looked at. The best checkpoint's re-evaluation
catches it (`audit.best`).
"""

from __future__ import annotations

from typing import Any

from aiperf_runner.train import trial

LUCKY = 0.99
_train_and_evaluate = trial._train_and_evaluate


def lucky(run: Any, model: Any, epoch: int, *args: Any, **kwargs: Any) -> Any:
    measured = _train_and_evaluate(run, model, epoch, *args, **kwargs)
    if epoch == 1:
        measured.accuracy = LUCKY
    return measured


trial._train_and_evaluate = lucky

if __name__ == "__main__":
    trial._exit_now(trial.main())
