"""A run's options as resolved: stored in run.json `config` and reused by --resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.peaks import PRECISIONS

TRIAL_MODULE = "aiperf_runner.train.trial"
LR_RULES = ("linear", "none")  # as train/lrscale.py (which needs torch; this module must not)
# How ImageFolder images are decoded and augmented (train/decode.py; docs/rules.md, "Decoders"): `tensor`
# (torchvision.io, augmentation on uint8 tensors), `pil` (the reference) or `device` (train/devdecode.py: JPEGs
# decoded in batches on the training device, nvJPEG on a GPU). Chosen at a run's start, from
# $AIPERF_DATA_DECODER or the default, and written to run.json and to every trial.json.
DATA_DECODERS = ("tensor", "pil", "device")
# The decoders whose images a pixel pack may hold (`stage --decoded`): decoding on the device is done in the run.
PIXEL_DECODERS = ("tensor", "pil")
AUTO_PRECISION = "auto"
DEFAULT_DATA_DECODER = "tensor"
DECODER_ENV = "AIPERF_DATA_DECODER"


def auto_precision(preset: str, device_type: str) -> str:
    """What `--precision auto` means: bf16 for the imagenet preset on GPUs (the precision its reference
    throughput and `estimate` assume: fp32 trains about 3x slower there), fp32 elsewhere (the gates of the
    small presets were measured in fp32)."""
    return "bf16" if preset == "imagenet" and device_type == "cuda" else "fp32"


class ControllerError(AiperfError, RuntimeError):
    """A run that cannot start or resume (bad options, run directory in use or finished...)."""


@dataclass
class RunConfig:
    """The run's options as resolved; stored in run.json `config` and reused by --resume."""

    preset: str = "smoke"
    slots: int | None = 1  # None: as many as the backend offers (SLURM: the nodes available)
    duration_s: float = 300.0
    backend: str = "local"
    devices_per_slot: int = 0  # 0: the backend's default (local on CPU: the cores shared out between the slots)
    precision: str = "auto"  # auto: bf16 for imagenet on GPUs, else fp32 (resolved once the run's devices are known)
    data: str | None = None
    data_manifest: str | None = None  # run --data-manifest: a pack's manifest where the controller reads it
    stage_data: str | None = None  # run --stage-data: node-local directory (`%n`: the node) the data is copied to
    seed: int = 0
    max_retries: int = 2
    rules: str = "v2"
    backend_options: dict[str, Any] = field(default_factory=dict)
    trial_module: str = TRIAL_MODULE
    epoch_budgets: list[int] = field(default_factory=list)
    early_stopping_patience: int = 0
    system_name: str = ""  # the name the list shows; empty: the list describes the hardware instead
    interconnect: str = ""  # e.g. "InfiniBand NDR 400"; nothing detects it reliably, so the operator says
    system_id: str = ""  # the service's id of the registered system the run is judged by (run --system)
    publish_hostnames: bool = False  # log node names as they are, not as the site's pseudonyms
    # The trials' learning rate (train/lrscale.py): scaled linearly with the global batch (or not),
    # relative to this batch (0: the per-device batch, so k = ranks), after a warm-up of this many
    # epochs (None: 1 epoch, 5 when scaled up; at most a tenth of the trial's budget).
    lr_scaling: str = "linear"
    lr_reference_batch: int = 0
    lr_warmup_epochs: float | None = None
    cpu_bind: bool = True  # pin each rank and its data-loader workers to its cores (util/cpubind.py)
    rehearsal: bool = False  # run --rehearsal: on a rehearsal token (never ranked; submit --rehearsal)
    keep_states: bool = False  # run --keep-states: store every committed state, witnessed or not
    data_decoder: str = ""  # one of DATA_DECODERS; "": $AIPERF_DATA_DECODER, else the default (resolved at the start)

    def lr_settings(self) -> dict[str, Any]:
        """trial.json's `lr_scaling` object."""
        return {"rule": self.lr_scaling, "reference_batch": self.lr_reference_batch,
                "warmup_epochs": self.lr_warmup_epochs}

    def check(self) -> None:
        if self.slots is not None and self.slots < 1:
            raise ControllerError("--slots must be at least 1")
        if self.devices_per_slot < 0:
            raise ControllerError("--devices-per-slot must be at least 1 (or 0: the backend's default)")
        if self.duration_s <= 0:
            raise ControllerError("--duration must be positive")
        if self.max_retries < 0:
            raise ControllerError("--max-retries must be 0 or more")
        if self.precision not in (AUTO_PRECISION, *PRECISIONS):
            raise ControllerError(f"--precision must be {AUTO_PRECISION} or one of {', '.join(PRECISIONS)}")
        if self.lr_scaling not in LR_RULES:
            raise ControllerError(f"--lr-scaling must be one of {', '.join(LR_RULES)}")
        if self.lr_reference_batch < 0:
            raise ControllerError("--lr-reference-batch must be 0 (the per-device batch) or more")
        if self.lr_warmup_epochs is not None and not 0 <= self.lr_warmup_epochs < float("inf"):
            raise ControllerError("--lr-warmup-epochs must be 0 or more")
        if self.data_decoder and self.data_decoder not in DATA_DECODERS:
            raise ControllerError(f"{DECODER_ENV}={self.data_decoder}: the decoder must be one of "
                                  f"{', '.join(DATA_DECODERS)}")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunConfig:
        known = {f for f in cls.__dataclass_fields__}
        # A run.json written before the default was resolved at the start ran one device per slot; one
        # written before decoders were named decoded its images with PIL.
        return cls(**{"devices_per_slot": 1, "data_decoder": "pil", **{k: v for k, v in data.items() if k in known}})
