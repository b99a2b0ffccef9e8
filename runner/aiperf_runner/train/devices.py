"""The accelerator model each rank of a trial actually trains on, for the trial's log.

A partition can mix GPU models (or a node can come up with a different one), and the run's system
facts are probed on one node only; so the first `epoch_end` an attempt logs carries
`accelerators`: {model name: number of ranks on it} over every rank of the attempt, "cpu" for a
CPU process (docs/log-format.md). Verification shows them next to the registered model.
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.distributed as dist

from .distenv import DistEnv

MAX_NAME = 200  # the schema's bound on a model name


def device_model(device: torch.device) -> str:
    """torch's name of the device's model ("NVIDIA H200"), or "cpu"."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)[:MAX_NAME] or "cuda"
    return device.type


def accelerator_models(denv: DistEnv, device: torch.device) -> dict[str, int]:
    """{model: ranks} over the attempt's ranks (a collective: every rank calls it)."""
    name = device_model(device)
    names: list[object] = [name]
    if denv.world_size > 1 and dist.is_available() and dist.is_initialized():
        names = [None] * denv.world_size
        dist.all_gather_object(names, name)
    return dict(sorted(Counter(str(n) for n in names).items()))
