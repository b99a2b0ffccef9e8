"""The `device` decoder: ImageFolder JPEGs decoded on the training device in batches (nvJPEG on a CUDA GPU,
libjpeg-turbo on the CPU), then cropped, resized and flipped there.

A data-loading worker does no decoding: it reads the file's bytes, takes the image's size from its JPEG frame
header and draws the crop's box and the flip from the image's seed, the same numbers in the same order as the
`tensor` decoder (decode.py `TrainCrop`). The trial's process decodes a batch's JPEGs with one
`decode_jpeg(list, device=...)` call and finishes each image where it was decoded (`DeviceFinish`). A file the
workers cannot hand over as a JPEG (PNG, CMYK, arithmetic-coded, a broken header) they decode with the `tensor`
decoder and hand over its pixels; cifar's small images are transformed whole in the workers as `tensor` does.

On the CPU the images are the `tensor` decoder's bit for bit (tests/train/test_device_decoder.py), so the
service's audit, which re-executes on CPUs, sees the run's images. On a GPU, nvJPEG's IDCT and chroma
upsampling are not libjpeg-turbo's: a trial that decodes on a GPU first compares its validation images with
the reference `pil` path (`tolerance_problem`) and refuses to train when they are further apart than the rules'
tolerance for decoders (docs/rules.md, "Decoders").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torchvision.io import ImageReadMode, decode_jpeg

from aiperf_runner.spec.presetfacts import DECODER_TOLERANCE

from . import decode

# What a worker hands over for one image: (kind, payload, box, flip) with box = (top, left, h, w) of the training
# crop or None (validation: the centre crop).
JPEG, PIXELS, FINISHED = 0, 1, 2  # payload: the file's bytes | the decoded (3, H, W) image | the finished image
Item = tuple[int, torch.Tensor, "tuple[int, int, int, int] | None", bool]

# The rules' tolerance for a decoder's validation images against the reference (`pil`), in levels of 255.
TOLERANCE_MEAN, TOLERANCE_MAX = DECODER_TOLERANCE
CHECK_IMAGES = 32  # validation images a trial on a GPU compares before it trains

_SOF_NVJPEG = (0xC0, 0xC1, 0xC2)  # baseline, extended and progressive Huffman: what nvJPEG decodes


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) from a JPEG's frame header, for a Huffman-coded JPEG of 1 or 3 components (what
    `decode_jpeg` decodes on every device); None for anything else."""
    if data[:3] != b"\xff\xd8\xff":
        return None
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # a fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            i += 2
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a frame header (SOFn)
            if i + 10 > n:
                return None
            height, width = int.from_bytes(data[i + 5:i + 7], "big"), int.from_bytes(data[i + 7:i + 9], "big")
            ok = marker in _SOF_NVJPEG and data[i + 9] in (1, 3) and height > 0 and width > 0
            return (height, width) if ok else None
        if marker == 0xDA:  # a scan before any frame header
            return None
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    return None


def encoded(data: bytes | memoryview) -> tuple[int, torch.Tensor, int, int]:
    """A worker's image from a file's (or a pack's) bytes: (JPEG, bytes, H, W), else (PIXELS, image, H, W)
    decoded here by the `tensor` decoder."""
    data = bytes(data)
    size = jpeg_size(data)
    if size is None:
        image = decode.decode_rgb(data)
        return PIXELS, image, int(image.shape[1]), int(image.shape[2])
    return JPEG, torch.frombuffer(bytearray(data), dtype=torch.uint8), *size


def read_encoded(path: str) -> tuple[int, torch.Tensor, int, int]:
    """`encoded` of the file at `path` (the ImageFolder loader)."""
    with open(path, "rb") as fh:
        return encoded(fh.read())


class PlanTrainCrop:
    """imagenet's training transform, in the worker: the box and flip of decode.py `TrainCrop`, drawn alike."""

    def __call__(self, image: tuple[int, torch.Tensor, int, int]) -> Item:
        kind, payload, height, width = image
        box = decode.crop_box(height, width)
        return kind, payload, box, decode.flip_drawn()


class PlanCentre:
    """Validation, in the worker: nothing drawn, the centre crop is made on the device."""

    def __call__(self, image: tuple[int, torch.Tensor, int, int]) -> Item:
        return image[0], image[1], None, False


class PlanFinished:
    """cifar: the `tensor` decoder's whole transform in the worker (32-pixel images: no decode worth moving)."""

    def __init__(self, transform: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.transform = transform

    def __call__(self, image: tuple[int, torch.Tensor, int, int]) -> Item:
        kind, payload = image[0], image[1]
        pixels = decode.decode_rgb(payload.numpy().tobytes()) if kind == JPEG else payload
        return FINISHED, self.transform(pixels), None, False


def plans(name: str, image_size: int) -> tuple[Any, Any]:
    """The workers' training and validation transforms of `name` (cifar, imagenet) with the `device` decoder."""
    if name == "imagenet":
        return PlanTrainCrop(), PlanCentre()
    train, val = decode.tensor_transforms(name, image_size)
    return PlanFinished(train), PlanFinished(val)


def collate(batch: Sequence[tuple[Item, int]]) -> tuple[list[Item], torch.Tensor]:
    """A batch as the workers hand it over: the items as they are (images of many sizes), the labels stacked."""
    return [item for item, _ in batch], torch.tensor([label for _, label in batch], dtype=torch.long)


class DeviceFinish:
    """A batch's items -> its uint8 (N, 3, S, S) images on `device`: the JPEGs decoded in one call there, each
    image cropped (the training box, or validation's resize and centre crop), resized and flipped there."""

    def __init__(self, device: torch.device, name: str, image_size: int) -> None:
        self.device, self.size = device, int(image_size)
        self.centre = decode.tensor_transforms(name, image_size)[1]  # validation's resize and centre crop

    def decode(self, raws: list[torch.Tensor]) -> list[torch.Tensor]:
        """The JPEGs decoded on the device; one that fails there (nvJPEG returns nothing of a batch with a
        bad image) is decoded by the `tensor` decoder and moved."""
        if not raws:
            return []
        try:
            return list(decode_jpeg(raws, mode=ImageReadMode.RGB, device=self.device))
        except RuntimeError:
            return [decode.decode_rgb(raw.numpy().tobytes()).to(self.device) for raw in raws]

    def __call__(self, items: list[Item]) -> torch.Tensor:
        jpegs = [i for i, item in enumerate(items) if item[0] == JPEG]
        decoded = dict(zip(jpegs, self.decode([items[i][1] for i in jpegs]), strict=True))
        out = []
        for i, (kind, payload, box, flip) in enumerate(items):
            image = decoded[i] if kind == JPEG else payload.to(self.device, non_blocking=True)
            if kind != FINISHED:
                image = self.centre(image) if box is None else decode.crop_resize_flip(image, box, flip, self.size)
            out.append(image)
        return torch.stack(out)


def first_images(val_set: Any, count: int = CHECK_IMAGES) -> list[bytes]:
    """The bytes of the first `count` images of a validation set (an ImageFolder's files, or a pack's images)."""
    count = min(count, len(val_set))
    if hasattr(val_set, "reader"):  # sharded_folder.py's ShardedImageFolder
        return [bytes(val_set.reader.read(i)[0]) for i in range(count)]
    out = []
    for path, _label in val_set.samples[:count]:
        with open(path, "rb") as fh:
            out.append(fh.read())
    return out


def val_difference(images: Sequence[bytes], name: str, image_size: int, device: torch.device,
                   reference: Callable[[Any], torch.Tensor]) -> tuple[float, int]:
    """(mean, largest) absolute difference in levels of 255 between this device's validation images of `images`
    (files' bytes) and `reference`'s (the `pil` path's validation transform, data.py `folder_transforms`) of
    PIL's decode."""
    plan = PlanCentre()
    ours = DeviceFinish(device, name, image_size)([plan(encoded(data)) for data in images]).cpu().int()
    theirs = torch.stack([reference(decode.pil_rgb_image(data)) for data in images]).int()
    diff = (ours - theirs).abs()
    return float(diff.double().mean()), int(diff.max())


def tolerance_problem(images: Sequence[bytes], name: str, image_size: int, device: torch.device,
                      reference: Callable[[Any], torch.Tensor]) -> str | None:
    """What is wrong with this device's validation images of `images` against the reference's, beyond the rules'
    tolerance for decoders; None within it."""
    mean, worst = val_difference(images, name, image_size, device, reference)
    if mean <= TOLERANCE_MEAN and worst <= TOLERANCE_MAX:
        return None
    return (f"the device decoder on {device} gives validation images {mean:.3f} levels of 255 from the reference "
            f"(pil) on average, at most {worst}, over {len(images)} images; the rules admit a mean of "
            f"{TOLERANCE_MEAN} and at most {TOLERANCE_MAX}: decode with AIPERF_DATA_DECODER=tensor")
