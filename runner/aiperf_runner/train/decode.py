"""The `tensor` decoder of ImageFolder images: bytes -> uint8 tensor -> augmentation on the tensor.

Three decoders are admitted (docs/rules.md, "Decoders"); trial.json `data_decoder` says which a trial
uses, and the audit's replay of a segment uses the same one (the third, `device`, is devdecode.py's: the
JPEGs decoded on the training device, cropped with this module's code):

- `pil`: the reference, torchvision's own path (PIL decodes, `folder_transforms` in data.py augments
  the PIL image, `PILToTensor` at the end).
- `tensor` (the default): the file's bytes decoded by `torchvision.io` (libjpeg-turbo; other formats by
  `decode_image`, then PIL for what torchvision cannot read), forced to 3 channels, and augmented on the
  uint8 tensor: RandomResizedCrop draws its box as torchvision does, the box is cropped as a view and only
  the crop is resized (torch's vectorised uint8 bilinear, antialiased), then the flip. Validation resizes
  the shorter side and crops the centre.

The random numbers are drawn from torch's global generator in the order torchvision's transforms draw
them, so `SeededImages` (data.py) makes every image's crop and flip a function of its seed, and the same
seed gives the same box and flip with either decoder: the two differ only in resampling (torch's uint8
antialiased bilinear follows Pillow's: validation outputs 0.002 levels of 255 apart on average, at most 1;
bench/data_path.py).

Images/s on one core against the `pil` path (bench/data_path.py, 2,000 JPEGs of 500x375, 88 kB): decode
1.65x, the training transform alone 2.8x and the validation transform 2.9x; with the decode, a worker
delivers 1.4x the training and 1.8x the validation images (1.5x and 1.75x on a 2-core AMD EPYC). The decode
(libjpeg-turbo in both paths) is then about 80 % of the cost. Decoding at a reduced DCT scale (PIL's `draft`)
does not apply at ImageNet's sizes: a crop of a 500x375 image is never 448 pixels (twice 224) on both sides,
so a half-scale decode would be enlarged again, and validation's 256-pixel side is more than half of 375.
Decoding only the crop's box (libjpeg-turbo's `jpeg_crop_scanline` and `jpeg_skip_scanlines`, which would
need a compiled extension) saves too little to be worth one: bench/jpeg_roi.c measured the box 1.15-1.23x
faster than the whole image (1,000 files, one core; the entropy decoding above the box is still done), so an
estimated 1.75x for the training path in all. What does reach past 2x is not decoding in the run at all: a
pixel pack (`stage --decoded`, data/shards.py) holds `tensor_pixels`' output, which `tensor_from_pixels`
gives back as the very tensor `decode_rgb` made, and the training path from it is 6.2x the `pil` path from
files per core (bench/data_path.py --packed), for about 6.4 times the disk. torchvision deprecates its
decoders from 0.29 in favour of TorchCodec's; they still ship.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torchvision.io import ImageReadMode, decode_image, decode_jpeg
from torchvision.transforms.v2 import functional as TF

from aiperf_runner.rundir.config import DATA_DECODERS, DECODER_ENV, DEFAULT_DATA_DECODER

__all__ = ["DATA_DECODERS", "PIXEL_CODECS", "decode_rgb", "default_decoder", "pil_from_pixels", "pil_pixels",
           "pil_rgb_image", "read_rgb", "tensor_from_pixels", "tensor_pixels", "tensor_transforms"]

_JPEG_MAGIC = b"\xff\xd8\xff"
_SCALE = (0.08, 1.0)  # torchvision's RandomResizedCrop defaults
_RATIO = (3.0 / 4.0, 4.0 / 3.0)
# As torchvision computes them (float32), so that the bounds, hence the draws, are bit for bit its own.
_LOG_RATIO = tuple(float(v) for v in torch.log(torch.tensor(_RATIO)))


def default_decoder() -> str:
    """The decoder of a data set whose trial names none: $AIPERF_DATA_DECODER, else `tensor`."""
    return os.environ.get(DECODER_ENV) or DEFAULT_DATA_DECODER


def _pil_rgb(data: bytes) -> torch.Tensor:
    """What torchvision cannot decode, as ImageFolder's own loader reads it (PIL, `convert("RGB")`)."""
    import io

    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        rgb = np.asarray(img.convert("RGB"))
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1)


def pil_rgb_image(data: bytes | memoryview) -> Any:
    """The `pil` decoder's loader for bytes (a packed image, data/shards.py): torchvision's `pil_loader`
    (PIL, `convert("RGB")`) on the file's bytes."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")


def pil_pixels(data: bytes) -> tuple[bytes, int, int]:
    """The `pil` decoder's image of a file's bytes as a pixel pack stores it (data/shards.py, `stage
    --decoded`): (H x W x 3 RGB bytes, height, width)."""
    img = pil_rgb_image(data)
    return img.tobytes(), img.height, img.width


def pil_from_pixels(data: bytes | bytearray | memoryview, height: int, width: int) -> Any:
    """A pixel pack's image as the `pil` decoder's loader returns it (PIL's RGB image)."""
    from PIL import Image

    return Image.frombytes("RGB", (width, height), bytes(data))


def tensor_pixels(data: bytes) -> tuple[bytes, int, int]:
    """The `tensor` decoder's image of a file's bytes as a pixel pack stores it (data/shards.py, `stage
    --decoded`): (H x W x 3 RGB bytes, height, width)."""
    image = decode_rgb(data)
    return image.permute(1, 2, 0).contiguous().numpy().tobytes(), int(image.shape[1]), int(image.shape[2])


def tensor_from_pixels(data: bytes | bytearray | memoryview, height: int, width: int) -> torch.Tensor:
    """A pixel pack's image as `decode_rgb` returns it: a uint8 (3, H, W) view of the interleaved pixels (the
    layout libjpeg-turbo's output has too); over `data` itself when it is writable (a pixel pack's
    copy-on-write map, data/shards.py), else over a copy. The transforms never write into their input: a
    write would stay in this process's copy of the page and change what the next epoch reads (the batches of
    two epochs against the tree's: tests/train/test_sharded_folder.py)."""
    writable = isinstance(data, bytearray) or (isinstance(data, memoryview) and not data.readonly)
    buffer = data if writable else bytearray(data)
    return torch.frombuffer(buffer, dtype=torch.uint8).view(height, width, 3).permute(2, 0, 1)


# decoder -> (a file's bytes -> its pixels as a pixel pack stores them, those pixels -> the decoder's loaded image)
PIXEL_CODECS: dict[str, tuple[Callable[[bytes], tuple[bytes, int, int]],
                              Callable[[bytes | bytearray | memoryview, int, int], Any]]] = {
    "pil": (pil_pixels, pil_from_pixels), "tensor": (tensor_pixels, tensor_from_pixels)}


def read_rgb(path: str) -> torch.Tensor:
    """The image at `path` as a uint8 (3, H, W) tensor (grey expanded, alpha dropped, as PIL's RGB)."""
    with open(path, "rb") as fh:
        return decode_rgb(fh.read())


def decode_rgb(data: bytes | memoryview) -> torch.Tensor:
    """An image file's bytes (a packed image, data/shards.py, or a file's) as a uint8 (3, H, W) tensor."""
    data = bytes(data) if isinstance(data, memoryview) else data
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    try:
        if data[:3] == _JPEG_MAGIC:
            image = decode_jpeg(raw, mode=ImageReadMode.RGB)
        else:
            image = decode_image(raw, mode=ImageReadMode.RGB)
    except (RuntimeError, ValueError):  # a format or variant libjpeg/libpng/libwebp here do not read
        return _pil_rgb(data)
    if image.ndim == 4:  # an animated GIF: its first frame, as PIL reads it
        image = image[0]
    return image if image.shape[0] == 3 else image.expand(3, -1, -1)


def _resize(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Bilinear, antialiased: torch's vectorised uint8 kernel on the CPU (no float copy of the image).

    The kernel works on interleaved (H, W, C) pixels: a crop, a strided view, is copied into that layout
    first (0.02 ms), which halves the kernel's own repacking (0.24 -> 0.16 ms for a training crop)."""
    if image.device.type != "cpu":  # that kernel is the CPU's: elsewhere torchvision resizes a float copy
        return TF.resize_image(image, [height, width], antialias=True)
    batch = image.unsqueeze(0).contiguous(memory_format=torch.channels_last)
    return F.interpolate(batch, size=[height, width], mode="bilinear", align_corners=False, antialias=True)[0]


def crop_box(height: int, width: int) -> tuple[int, int, int, int]:
    """(top, left, h, w) of torchvision's RandomResizedCrop (default scale and ratio), drawing the same
    numbers from torch's global generator in the same order (v2 `RandomResizedCrop.make_params`)."""
    area = height * width
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(*_SCALE).item()
        aspect_ratio = torch.exp(torch.empty(1).uniform_(*_LOG_RATIO)).item()
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, size=(1,)).item())
            left = int(torch.randint(0, width - w + 1, size=(1,)).item())
            return top, left, h, w
    ratio = width / height  # fallback: the central crop within the ratio bounds
    lo, hi = _RATIO
    if ratio < lo:
        w, h = width, int(round(width / lo))
    elif ratio > hi:
        w, h = int(round(height * hi)), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def flip_drawn() -> bool:
    """RandomHorizontalFlip(p=0.5)'s draw as torchvision makes it (one `torch.rand(1)`): True to flip."""
    return bool(torch.rand(1) < 0.5)


def crop_resize_flip(image: torch.Tensor, box: tuple[int, int, int, int], flip: bool, size: int) -> torch.Tensor:
    """The training image of `image` (on any device): the box (top, left, h, w) as a view, only it resized to
    size x size, then flipped; the `device` decoder (devdecode.py) finishes its crops with this too."""
    top, left, h, w = box
    out = _resize(image[:, top:top + h, left:left + w], size, size)
    return (out.flip(-1) if flip else out).contiguous()


class TrainCrop:
    """imagenet's training transform: RandomResizedCrop(size) then RandomHorizontalFlip, on a uint8 tensor.

    The crop is a view of the decoded image and only it is resized (torchvision's order too, but with
    none of its per-call dispatch)."""

    def __init__(self, size: int) -> None:
        self.size = int(size)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        box = crop_box(image.shape[-2], image.shape[-1])
        return crop_resize_flip(image, box, flip_drawn(), self.size)


class CenterCrop:
    """Validation: the shorter side resized to `resize`, then the central `size` x `size` crop.

    Resized whole, then cropped (as torchvision does): resizing only the central box in the original's
    coordinates would save part of the resize but move the outputs 5 levels from the reference on average
    (the box's edges fall between pixels; bench/data_path.py --val-box), against 0.002 this way."""

    def __init__(self, resize: int, size: int) -> None:
        self.resize, self.size = int(resize), int(size)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        height, width = image.shape[-2:]
        short, long = (height, width) if height <= width else (width, height)
        new_short, new_long = self.resize, int(self.resize * long / short)  # torchvision's rounding (down)
        h, w = (new_short, new_long) if height <= width else (new_long, new_short)
        resized = image if (h, w) == (height, width) else _resize(image, h, w)
        return TF.center_crop_image(resized, [self.size, self.size]).contiguous()


class _CifarTrain:
    """cifar's training transform on a uint8 tensor: torchvision's own v2 transforms (same draws as the
    PIL path; its images are small, the decode is the cost)."""

    def __init__(self, size: int) -> None:
        from torchvision.transforms import v2 as T

        pad = max(1, size // 8)
        self.transform = T.Compose([T.Resize(size, antialias=True), T.RandomCrop(size, padding=pad),
                                    T.RandomHorizontalFlip()])

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.transform(image)
        return out.contiguous()


def tensor_transforms(name: str, image_size: int) -> tuple[Any, Any]:
    """Train and validation transforms (uint8 tensor -> uint8 (3, S, S) tensor) of data.py's
    `folder_transforms`, for images that `read_rgb` decoded."""
    if name == "imagenet":
        return TrainCrop(image_size), CenterCrop(int(round(image_size * 256 / 224)), image_size)
    return _CifarTrain(image_size), CenterCrop(image_size, image_size)
