"""A forged trial program: the real one, but its images are 8 pixels wide where the preset's are 16.

    python -m tests.service.small_images_trial TRIAL_DIR --attempt N

The red team's "smaller images" attack, made at the source: the trial generates, trains and evaluates on a
quarter of the pixels (a quarter of the FLOPs the graph is charged at the preset's size; the network's
weights fit either size), commits every state where the rules ask and logs everything else honestly, its
trial.json and graphs the preset's. The audit replays its segments on the preset's data at the preset's
size, never the size a site's trial.json or trial program chose, and they end elsewhere (`audit.replay`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aiperf_runner.train import trial
from aiperf_runner.train.data import DataSpec, TrialData

SIZE = 8
_build_data = trial.build_data


def smaller(spec: DataSpec, **options: Any) -> TrialData:
    return _build_data(dataclasses.replace(spec, image_size=SIZE), **options)


trial.build_data = smaller  # type: ignore[assignment]

if __name__ == "__main__":
    trial._exit_now(trial.main())
