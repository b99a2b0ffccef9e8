"""A forged trial program: the real one, but it trains one batch in four and logs whole epochs.

    python -m tests.service.skipping_trial TRIAL_DIR --attempt N

The red team's "train a quarter of each epoch" attack, made at the source so that everything else is
honest: the log's chain, signature and receipts, whole epochs of images claimed, every commitment at
the steps the rules ask for (what it committed is the state it really reached), true accuracies. Only
re-executing a segment can tell: its steps, done in full from the committed start, do not end at the
committed state (`audit.replay`).
"""

from __future__ import annotations

import torch
from aiperf_runner.train import trial

KEEP_ONE_IN = 4


def skipping(model, criterion, optimizer, data, precision, scaler, schedule, epoch, device,  # type: ignore[no-untyped-def]
             committer=None, on_first_step=None) -> trial.EpochTotals:
    model.train()
    data.train.set_epoch(epoch)
    steps = len(data.train)
    loss_sum = torch.zeros((), dtype=torch.float32, device=device)
    samples = 0
    if committer is not None:
        committer.begin_epoch(epoch, steps)
    for step, (images, labels) in enumerate(data.train):
        n = labels.shape[0]
        samples += n  # claimed, trained or not
        if step % KEEP_ONE_IN == 0:
            schedule.set(epoch - 1 + step / steps)
            images = data.normalizer(images)
            with precision.autocast():
                loss = criterion(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            loss_sum.add_(loss.detach().float(), alpha=n)
        if committer is not None:
            committer.after_step(step + 1)  # committed where the rules ask, whatever was trained
        if step == 0 and on_first_step is not None:
            on_first_step()
    return trial.EpochTotals(samples, loss_sum)


trial.train_one_epoch = skipping

if __name__ == "__main__":
    trial._exit_now(trial.main())
