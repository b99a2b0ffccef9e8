"""What one node can do before a reservation is booked (`aiperf-runner preflight`): torch's import time,
the preset's seed trial on the node's device (time to its first step, then images/s), and the training
transform's images/s per CPU core; from these, the node's expected training rate and which side limits it.

The seed trial is the runner's own loop (`train_one_epoch`, the trial's model, optimizer, precision and
channels-last layout) over one synthetic batch kept on the device, as bench/gpu_trial.py measures it: data
loading is out of that figure and measured on its own (decode.py, on ImageNet-sized JPEGs made here, or a
sample of the site's own images).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from aiperf_runner.data.presets import get_preset
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.seeds import seed_for_preset

from .builder import build_module
from .precision import setup_precision
from .trial import MOMENTUM, CosineSchedule, train_one_epoch

JPEG_SIZE = (500, 375)  # an average ImageNet training image (width, height)


def torch_import_s() -> float:
    """Seconds a fresh interpreter takes to import torch (and start CUDA where there is a GPU): paid by every
    trial process that starts cold."""
    code = "import torch\nif torch.cuda.is_available(): torch.cuda.init()"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=600)
    return time.perf_counter() - started


class SameBatch:
    """A loader of `steps` copies of one device batch, read as the trial loop reads a loader."""

    def __init__(self, batch: tuple[torch.Tensor, torch.Tensor], steps: int) -> None:
        self.batch, self.steps = batch, steps

    def set_epoch(self, epoch: int) -> None:
        return None

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return (self.batch for _ in range(self.steps))


@dataclass
class BatchData:
    train: SameBatch
    normalizer: Any


@dataclass
class TrialSpeed:
    device: str
    precision: str
    batch: int
    first_step_s: float  # from the model's construction to its first step done (cuDNN autotuning included)
    images_per_s: float  # steady state, one device
    train_flops_per_image: float  # the seed's v2 FLOPs per trained image (spec/flops.py)


def seed_trial_speed(preset: str, device: torch.device, precision: str, batch: int, steps: int) -> TrialSpeed:
    """The preset's seed trained on `device` over `steps` timed steps (after the first, which is timed alone)."""
    p = get_preset(preset)
    graph = seed_for_preset(preset, p.classes, p.image_size)
    prec = setup_precision(precision, device)
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(batch, p.channels, p.image_size, p.image_size, generator=gen)
    labels = torch.randint(0, p.classes, (batch,), generator=gen)
    batch_on_device = (images.to(device).contiguous(memory_format=torch.channels_last), labels.to(device))
    started = time.perf_counter()
    torch.manual_seed(0)
    model = build_module(graph).to(device).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=MOMENTUM, weight_decay=5e-5)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    schedule = CosineSchedule(optimizer, 0.1, 2)
    scaler = prec.make_scaler()

    def epoch(n: int, number: int) -> None:
        data = cast(Any, BatchData(SameBatch(batch_on_device, n), lambda x: x))  # what the loop reads of a TrialData
        totals = train_one_epoch(model, criterion, optimizer, data,
                                 prec, scaler, schedule, number, device)
        float(totals.loss_sum)  # the epoch's one read-back, as a trial makes it
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    epoch(1, 1)
    first_step_s = time.perf_counter() - started
    timed = time.perf_counter()
    epoch(steps, 2)
    rate = batch * steps / (time.perf_counter() - timed)
    flops = float(flops_per_image(graph, "v2").train)
    return TrialSpeed(str(device), precision, batch, first_step_s, rate, flops)


def synthetic_image(rng: Any, noise: float = 10.0) -> Any:
    """A 500x375 RGB image whose JPEG has a photograph's entropy: smooth fields at four scales plus noise."""
    import numpy as np
    from PIL import Image

    width, height = JPEG_SIZE
    acc = np.full((height, width, 3), 128.0, np.float32)
    for (w, h), amplitude in (((5, 4), 70.0), ((20, 15), 40.0), ((80, 60), 25.0), ((250, 188), 12.0)):
        field = rng.normal(0.0, 1.0, (h, w, 3)).astype(np.float32)
        for c in range(3):
            plane = Image.fromarray(field[:, :, c], mode="F").resize((width, height), Image.Resampling.BICUBIC)
            acc[:, :, c] += amplitude * np.asarray(plane)
    acc += rng.normal(0.0, noise, acc.shape).astype(np.float32)
    return Image.fromarray(np.clip(acc, 0, 255).astype(np.uint8))


def make_jpegs(directory: Path, n: int, seed: int = 0) -> list[str]:
    """`n` ImageNet-sized JPEGs (quality 90) of `synthetic_image`: about the entropy, and so the decoding cost,
    of photographs (60-120 kB each)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        path = directory / f"img{i:05d}.jpg"
        synthetic_image(rng).save(path, "JPEG", quality=90)
        paths.append(str(path))
    return paths


def sample_images(root: Path, n: int) -> list[str]:
    """Up to `n` JPEG files under `root` (a site's ImageFolder tree), in a stable order."""
    found: list[str] = []
    for path in sorted(root.rglob("*")):
        if path.suffix.lower() in (".jpg", ".jpeg") and path.is_file():
            found.append(str(path))
            if len(found) >= n:
                break
    return found


def training_transform(decoder: str, dataset: str, image_size: int,
                       decoded: bool = False) -> Callable[[str], torch.Tensor]:
    """A path -> the augmented uint8 image, as a data-loading worker of `dataset` (cifar, imagenet) makes it
    with `decoder` (data.py `folder_decoding`, the trials' own choice of transforms and loader). `decoded`: as
    it makes it from a pixel pack (`stage --decoded`): the image decoded here beforehand, its pixels handed
    over as a writable view (as a shard's copy-on-write map hands them) to the same transform."""
    from .data import DataSpec, folder_decoding
    from .decode import PIXEL_CODECS

    train, _val, load = folder_decoding(DataSpec(dataset, 0, image_size, decoder=decoder))
    if not decoded:
        return lambda path: train(load(path))
    stage, unpack = PIXEL_CODECS[decoder]
    pixels: dict[str, tuple[bytearray, int, int]] = {}

    def from_pixels(path: str) -> torch.Tensor:
        if path not in pixels:
            raw, h, w = stage(Path(path).read_bytes())
            pixels[path] = (bytearray(raw), h, w)
        buffer, height, width = pixels[path]
        return cast(torch.Tensor, train(unpack(memoryview(buffer), height, width)))

    return from_pixels


def decode_rate(decoder: str, dataset: str, image_size: int, files: list[str], seconds: float,
                decoded: bool = False) -> float:
    """Training-transform images/s of one CPU core (one torch thread, this process) with `decoder`: the file
    read, decoded and augmented as a data-loading worker does it (`decoded`: read from a pixel pack)."""
    transform = training_transform(decoder, dataset, image_size, decoded)
    if decoded:
        for path in files:  # decoded before the clock, as staging does
            transform(path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        done, started = 0, time.perf_counter()
        while True:
            for path in files:
                transform(path)
                done += 1
            elapsed = time.perf_counter() - started
            if elapsed >= seconds:
                return done / elapsed
    finally:
        torch.set_num_threads(threads)


def device_decode_rate(dataset: str, image_size: int, files: list[str], device: torch.device, seconds: float,
                       batch: int = 128) -> float:
    """Images/s of the `device` decoder's share on `device` (devdecode.py `DeviceFinish`: the JPEGs decoded in
    one call per batch, cropped, resized and flipped there), the workers' share done beforehand."""
    from . import devdecode

    plan, _val = devdecode.plans(dataset, image_size)
    items = [plan(devdecode.read_encoded(path)) for path in files]
    finish = devdecode.DeviceFinish(device, dataset, image_size)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    finish(items[:batch])  # CUDA context, nvJPEG handles
    done, started = 0, time.perf_counter()
    while True:
        for i in range(0, len(items), batch):
            finish(items[i:i + batch])
            done += len(items[i:i + batch])
        sync()
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return done / elapsed


def decode_rates(decoders: tuple[str, ...], dataset: str, image_size: int, data: Path | None, images: int,
                 seconds: float, device: torch.device | None = None) -> dict[str, Any]:
    """Each decoder's images/s per core on the site's images (`data`) or on JPEGs made here: `per_core` from
    the files, `per_core_decoded` from a pixel pack of them (`stage --decoded`; not the `device` decoder's,
    which decodes in the run); with `device` among them, `on_device`: its batches' images/s on `device`."""
    from .decode import PIXEL_CODECS

    with tempfile.TemporaryDirectory(prefix="aiperf-preflight-") as tmp:
        files = sample_images(data, images) if data is not None else make_jpegs(Path(tmp), images)
        if not files:
            raise FileNotFoundError(f"no JPEG files under {data}")
        size = sum(Path(f).stat().st_size for f in files) / len(files)
        rates = {name: decode_rate(name, dataset, image_size, files, seconds) for name in decoders}
        decoded = {name: decode_rate(name, dataset, image_size, files, seconds, decoded=True)
                   for name in decoders if name in PIXEL_CODECS}
        out = {"images": len(files), "mean_bytes": size, "source": str(data) if data else "made here",
               "per_core": rates, "per_core_decoded": decoded}
        if "device" in decoders:
            out["on_device"] = device_decode_rate(dataset, image_size, files, device or torch.device("cpu"), seconds)
    return out
