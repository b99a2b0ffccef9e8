"""Images/s per CPU core of the ImageFolder data path: the `pil` decoder against the `tensor` one.

Makes `--images` ImageNet-sized JPEGs (500x375 RGB, quality 90: smoothed random fields at four scales plus
pixel noise, about 88 kB a file, near ImageNet's mean) in a temporary directory, or reads the JPEG/PNG
files under `--data` (a real ImageFolder tree), then on ONE core (pinned with sched_setaffinity, one torch
thread, no DataLoader workers) measures, for both decoders, in `--rounds` interleaved rounds (the order
alternates each round):

  decode  the file to a 3-channel uint8 image: ImageFolder's PIL loader (`convert("RGB")`) against
          train/decode.py `read_rgb` (torchvision.io, libjpeg-turbo)
  train   decode + imagenet's training transform, each image seeded as SeededImages seeds it:
          data.py `folder_transforms` (RandomResizedCrop, RandomHorizontalFlip on the PIL image,
          PILToTensor) against decode.py `TrainCrop` (same box and flip, crop resized as a uint8 tensor)
  val     decode + the validation transform (resize the shorter side to 256, centre crop 224)

and prints each path's images per CPU-second (process time of this one-thread process: a busy neighbour
on the machine slows the wall clock, not that) and wall images/s, the best round of each, with the ratio
tensor/pil (the target: >= 2 for the training transform). `train alone` and `val alone`: the transforms
without the decode, on the first `--cached` images decoded beforehand by each path's own decoder. The
training measures count the per-image seeding of SeededImages (the CPU generator) (printed apart).

Then, untimed, the two paths' outputs on every image: mean and max absolute difference in 0-255 levels,
on validation (the tolerance docs/rules.md states) and on training (same seeds, so same boxes and flips:
the difference is resampling alone). `--val-box` also measures a cheaper validation order, the centre box
computed in the original's coordinates and only it resized, against the `pil` reference.

`--packed`: the files linked into an ImageFolder tree and packed (data/shards.py, as `aiperf-runner stage`
does), and packed decoded by each decoder (`stage --decoded`: pixel packs), the times printed; then on one
core, images per CPU-second of reading the bytes, and of reading + decoding + the training transform
(seeded as SeededImages does, each decoder), from the pack's memory maps and from the decoder's pixel pack
against from the files.

`--device cuda` (or `--device-decoder` on the CPU): the `device` decoder (train/devdecode.py) as a trial runs
it: the workers' share per CPU-second, then `decode_jpeg(list, device=...)` and the crops on the device in
batches of `--batch`, images/s of decode, train and val; then its validation images against the `pil`
reference, mean and max difference, with the rules' tolerance (the check a trial on a GPU makes at its start).

    python bench/data_path.py                     # 2,000 generated JPEGs, 3 rounds: about 5 minutes
    python bench/data_path.py --images 300 --rounds 2
    python bench/data_path.py --data /data/imagenet/val --images 5000
    python bench/data_path.py --device cuda --images 2000 --batch 256
    python bench/data_path.py --device-decoder --images 300 --rounds 2
    python bench/data_path.py --packed --images 2000

Measured on a 2-CPU machine (Xeon, AVX-512; torch 2.14, torchvision 0.29, Pillow 13 with libjpeg-turbo),
2,000 generated files of 87.7 kB, 3 rounds, images per CPU-second, pil -> tensor:

  decode 599 -> 990 (1.65x); train 474 -> 673 (1.42x); val 371 -> 669 (1.80x)
  train alone 1,347 -> 3,768 (2.80x; the CPU generator's seeding costs ~0 ms, torch.manual_seed cost 0.11 ms);
  val alone 874 -> 2,504 (2.87x)
  validation outputs 0.002 levels apart on average (worst image 0.003), at most 1; training 0.037 (worst
  image 0.248), at most 2; --val-box 5.15 on average, at most 55 (so validation resizes the whole image)

--device-decoder --images 1000 --rounds 2 on the same machine (the device being its CPU): the workers' share
9,154 images per CPU-second against the pil path's 492 (18.6x less CPU per image); the batches' share on the
CPU decode 1,028, train 756, val 684 images/s; validation 0.002 levels from pil on average, at most 1 (the
tensor decoder's figures: on a CPU it is that decoder). On a GPU: scripts/gpu-checks.sh.

--packed on the same machine, 2,000 generated files (and 10 more linked into val/), in the page cache:
  stage 176.2 MB into 2 shards in 0.42 s (422 MB/s, 2 threads); images per CPU-second files -> pack:
  read 31,972 -> 74,572 (2.33x); read + decode + train pil 421 -> 418 (0.99x), tensor 618 -> 637 (1.03x)

--packed --images 2000 --rounds 3 with the pixel packs (a 2-CPU Xeon): staged decoded in 1.69 s (tensor,
1,186 images/s on 2 threads; 1,131 MB against 176 MB); read + train per CPU-second, files -> pixel pack:
pil 517 -> 1,110 (2.15x), tensor 753 -> 3,218 (4.27x); today's path (pil, files) -> the pixel pack (tensor):
6.23x (--images 1000: 6.19x)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from aiperf_runner.spec.proof import sample_seed  # noqa: E402
from aiperf_runner.train import decode  # noqa: E402
from aiperf_runner.train.data import folder_transforms  # noqa: E402
from aiperf_runner.train.preflight import JPEG_SIZE, make_jpegs  # noqa: E402

SIZE = 224
RESIZE = 256
EXTENSIONS = (".jpg", ".jpeg", ".png", ".JPEG", ".JPG", ".PNG")


# ---- the images -------------------------------------------------------------------------------------

def find_images(root: Path, n: int) -> list[str]:
    paths = sorted(str(p) for p in root.rglob("*") if p.suffix in EXTENSIONS)
    if not paths:
        raise SystemExit(f"--data {root}: no JPEG or PNG file under it")
    step = max(1, len(paths) // n)  # spread over the classes, not the first folder's
    return paths[::step][:n]


# ---- the two paths -------------------------------------------------------------------------------------

Measure = tuple[Callable[[int], Any], int]  # (function of an image's number, how many images it runs over)
MEASURES = ("decode", "train", "val", "train alone", "val alone")


def paths_under_test(files: list[str], cached: int) -> dict[str, dict[str, Measure]]:
    """path -> measure -> (function, count). decode, train, val: from the file; the `alone` measures: the
    transform alone, on the first `cached` images decoded beforehand by the path's own decoder."""
    from torchvision.datasets.folder import pil_loader
    from torchvision.transforms import v2 as T

    pil_train, pil_val = folder_transforms("imagenet", SIZE)
    to_tensor = T.PILToTensor()
    tensor_train, tensor_val = decode.tensor_transforms("imagenet", SIZE)
    pil_images = [pil_loader(p) for p in files[:cached]]
    tensor_images = [decode.read_rgb(p) for p in files[:cached]]
    n, k = len(files), len(pil_images)
    return {
        "pil": {"decode": (lambda i: to_tensor(pil_loader(files[i])), n),
                "train": (lambda i: pil_train(pil_loader(files[i])), n),
                "val": (lambda i: pil_val(pil_loader(files[i])), n),
                "train alone": (lambda i: pil_train(pil_images[i]), k),
                "val alone": (lambda i: pil_val(pil_images[i]), k)},
        "tensor": {"decode": (lambda i: decode.read_rgb(files[i]), n),
                   "train": (lambda i: tensor_train(decode.read_rgb(files[i])), n),
                   "val": (lambda i: tensor_val(decode.read_rgb(files[i])), n),
                   "train alone": (lambda i: tensor_train(tensor_images[i]), k),
                   "val alone": (lambda i: tensor_val(tensor_images[i]), k)},
    }


def run_pass(fn: Callable[[int], Any], count: int, seeded: bool) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per image of `fn` over `count` images, each seeded as SeededImages seeds it
    (torch.default_generator.manual_seed(sample_seed(...)): its cost is counted, as a loader worker pays it)."""
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(count):
        if seeded:
            torch.default_generator.manual_seed(sample_seed(0, 0, i))
        fn(i)
    return (time.process_time() - cpu) / count, (time.perf_counter() - wall) / count


def measure(files: list[str], rounds: int, cached: int) -> dict[tuple[str, str], tuple[float, float]]:
    """(path, measure) -> the best (CPU s, wall s) per image over the rounds; the paths' order alternates
    each round. ("seed", "train"): the seeding alone, which both paths' training measures pay."""
    paths = paths_under_test(files, cached)
    best = {("seed", "train"): run_pass(lambda _: None, len(files), True)}
    for r in range(rounds):
        order = list(paths) if r % 2 == 0 else list(reversed(paths))
        for name in order:
            for what, (fn, count) in paths[name].items():
                cpu, wall = run_pass(fn, count, seeded=what.startswith("train"))
                old = best.get((name, what))
                best[(name, what)] = (min(cpu, old[0]), min(wall, old[1])) if old else (cpu, wall)
        print(f"  round {r + 1}/{rounds} done", flush=True)
    return best


def report(best: dict[tuple[str, str], tuple[float, float]], n: int, cached: int) -> None:
    print(f"\nimages/s on one core, best of the rounds ({n} files; the transforms alone on {cached} of them):")
    print(f"  {'':12} {'pil cpu':>9} {'tensor cpu':>11} {'ratio':>6}   {'pil wall':>9} {'tensor wall':>12} {'ratio':>6}")
    for what in MEASURES:
        (pc, pw), (tc, tw) = best[("pil", what)], best[("tensor", what)]
        print(f"  {what:12} {1 / pc:9.0f} {1 / tc:11.0f} {pc / tc:5.2f}x   {1 / pw:9.0f} {1 / tw:12.0f} {pw / tw:5.2f}x")
    seed = best[("seed", "train")][0]
    pil, tensor = best[("pil", "train alone")][0] - seed, best[("tensor", "train alone")][0] - seed
    print(f"  train counts the per-image seeding as SeededImages does it: {seed * 1e3:.2f} ms; without it "
          f"the training transform alone is {pil * 1e3:.2f} ms (pil), {tensor * 1e3:.2f} ms (tensor): {pil / tensor:.2f}x")


# ---- the outputs compared --------------------------------------------------------------------------------

class _ValBox:
    """Validation with the centre box computed in the original's coordinates and only it resized."""

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        height, width = image.shape[-2:]
        scale = RESIZE / min(height, width)
        h = w = round(SIZE / scale)
        top, left = int(round((height - h) / 2.0)), int(round((width - w) / 2.0))
        return decode._resize(image[:, top:top + h, left:left + w], SIZE, SIZE).contiguous()


def differences(files: list[str], val_box: bool) -> None:
    paths = paths_under_test(files, 0)
    box = _ValBox()
    sums: dict[str, list[float]] = {"val": [], "train": [], "val-box": []}
    peak = dict.fromkeys(sums, 0)
    for i in range(len(files)):
        ref = paths["pil"]["val"][0](i).int()
        pairs = {"val": (ref, paths["tensor"]["val"][0](i).int())}
        if val_box:
            pairs["val-box"] = (ref, box(decode.read_rgb(files[i])).int())
        torch.default_generator.manual_seed(sample_seed(0, 0, i))
        train_ref = paths["pil"]["train"][0](i).int()
        torch.default_generator.manual_seed(sample_seed(0, 0, i))
        pairs["train"] = (train_ref, paths["tensor"]["train"][0](i).int())
        for key, (a, b) in pairs.items():
            if a.shape != b.shape:
                raise SystemExit(f"{files[i]}: {key} outputs of shapes {tuple(a.shape)} and {tuple(b.shape)}")
            d = (a - b).abs()
            sums[key].append(float(d.float().mean()))
            peak[key] = max(peak[key], int(d.max()))
    print("\ntensor against pil, absolute difference in 0-255 levels over all images:")
    for key, means in sums.items():
        if means:
            print(f"  {key:8} mean {np.mean(means):.3f} (worst image's mean {max(means):.3f}), max {peak[key]}")


# ---- --device-decoder / --device cuda: the `device` decoder (train/devdecode.py) ---------------------------

def device_bench(files: list[str], batch: int, rounds: int, device: torch.device) -> None:
    """The `device` decoder's path as a trial runs it: the workers' share (read the bytes, parse the header,
    draw box and flip) per CPU-second, then the trial process's batches on `device` (decode alone, training
    crops, validation) in images/s, then its validation images against the `pil` reference (the check a trial
    on a GPU makes before it trains, here over every file)."""
    from aiperf_runner.train import devdecode

    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    from torchvision.datasets.folder import pil_loader

    raw = [Path(p).read_bytes() for p in files]
    train_plan, val_plan = devdecode.plans("imagenet", SIZE)
    pil_train = folder_transforms("imagenet", SIZE)[0]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a loader worker's one thread, both sides
    worker_s = pil_s = float("inf")
    for _ in range(rounds):  # the workers' share of the two paths, interleaved, each from the file
        train_items = []
        t0 = time.process_time()
        for i, path in enumerate(files):
            torch.default_generator.manual_seed(sample_seed(1, 0, i))
            train_items.append(train_plan(devdecode.read_encoded(path)))
        worker_s = min(worker_s, time.process_time() - t0)
        pil_s = min(pil_s, run_pass(lambda i: pil_train(pil_loader(files[i])), len(files), True)[0] * len(files))
    torch.set_num_threads(threads)
    val_items = [val_plan(devdecode.encoded(data)) for data in raw]
    finish = devdecode.DeviceFinish(device, "imagenet", SIZE)
    jpegs = sum(item[0] == devdecode.JPEG for item in val_items)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"the device decoder on {device} ({name}): {len(files)} files ({jpegs} handed over as JPEG), "
          f"batches of {batch}")
    print(f"  workers  {len(files) / worker_s:8.0f} images per CPU-second (read, header, box and flip), against "
          f"{len(files) / pil_s:.0f} for the pil path's training transform from the file: {pil_s / worker_s:.1f}x "
          "less CPU per image")

    def decode_only(chunk: list[devdecode.Item]) -> Any:
        return finish.decode([item[1] for item in chunk if item[0] == devdecode.JPEG])

    for label, fn, items in (("decode", decode_only, val_items), ("train", finish, train_items),
                             ("val", finish, val_items)):
        fn(items[:batch])  # warm-up: CUDA context, nvJPEG handles
        times = []
        for _ in range(rounds):
            sync()
            t0 = time.perf_counter()
            for i in range(0, len(items), batch):
                fn(items[i:i + batch])
            sync()
            times.append(time.perf_counter() - t0)
        print(f"  {label:8} {len(files) / min(times):8.0f} images/s (best of {rounds})")
    means, worst = [], 0
    reference = folder_transforms("imagenet", SIZE)[1]
    for i in range(0, len(raw), batch):
        mean, peak = devdecode.val_difference(raw[i:i + batch], "imagenet", SIZE, device, reference)
        means.append((mean, len(raw[i:i + batch])))
        worst = max(worst, peak)
    overall = sum(m * n for m, n in means) / len(raw)
    within = overall <= devdecode.TOLERANCE_MEAN and worst <= devdecode.TOLERANCE_MAX
    print(f"validation against pil: mean {overall:.3f} levels of 255, max {worst} (the rules admit "
          f"{devdecode.TOLERANCE_MEAN} and {devdecode.TOLERANCE_MAX}: {'within' if within else 'OVER'})")


# ---- --packed: the shard pack (aiperf-runner stage) against the files ----------------------------------

def link_tree(files: list[str], root: Path, classes: int = 10) -> Path:
    """An ImageFolder tree of links to `files`: train/ holds them all (class = number modulo `classes`),
    val/ one per class."""
    for i, path in enumerate(files):
        split_dirs = [root / "train" / f"c{i % classes:02d}"] + ([root / "val" / f"c{i:02d}"] if i < classes else [])
        for d in split_dirs:
            d.mkdir(parents=True, exist_ok=True)
            (d / Path(path).name).symlink_to(path)
    return root


def packed_bench(files: list[str], tmp: Path, rounds: int) -> None:
    """Images per CPU-second on one core of reading, and of reading + decoding + the training transform (as
    SeededImages seeds it), from the pack and from a pixel pack of each decoder (`stage --decoded`: nothing
    left to decode) against from the files, with each decoder."""
    from aiperf_runner.cli.stage import pixel_decoder
    from aiperf_runner.data import shards
    from aiperf_runner.train.data import SeededImages
    from aiperf_runner.train.sharded_folder import ShardedImageFolder, bytes_loader
    from torchvision.datasets import ImageFolder
    from torchvision.datasets.folder import pil_loader

    tree = link_tree(files, tmp / "tree")
    workers = len(os.sched_getaffinity(0))
    for dst, pixels in (("pack", None), ("pixels-pil", "pil"), ("pixels-tensor", "tensor")):
        result = shards.pack(tree, tmp / dst, workers=workers, pixels=pixel_decoder(pixels) if pixels else None)
        print(f"stage{' --decoded --decoder ' + pixels if pixels else ''}: {result.images} images, "
              f"{result.bytes / 1e6:.1f} MB in {result.shards} shards, {result.seconds:.2f} s ({result.images / result.seconds:.0f} "
              f"images/s, {result.bytes / 1e6 / result.seconds:.0f} MB/s, {workers} threads; the files in the page cache)")
    print(f"pinned to CPU {pin_one_core()}, 1 torch thread; {rounds} rounds")
    transforms = {"pil": (folder_transforms("imagenet", SIZE)[0], pil_loader),
                  "tensor": (decode.tensor_transforms("imagenet", SIZE)[0], decode.read_rgb)}
    cases: dict[tuple[str, str], Measure] = {}
    for name, (train_tf, loader) in transforms.items():
        from_files = ImageFolder(str(tree / "train"), transform=train_tf, loader=loader)
        from_pack = ShardedImageFolder(tmp / "pack", "train", train_tf, bytes_loader(name))
        from_pixels = ShardedImageFolder(tmp / f"pixels-{name}", "train", train_tf, bytes_loader(name))
        assert from_files.targets == from_pack.targets == from_pixels.targets
        n = len(from_pack)
        cases[("files", f"train ({name})")] = (SeededImages(from_files, 0).__getitem__, n)
        cases[("pack", f"train ({name})")] = (SeededImages(from_pack, 0).__getitem__, n)
        cases[("pixels", f"train ({name})")] = (SeededImages(from_pixels, 0).__getitem__, n)
        paths = [p for p, _t in from_files.samples]
        cases[("files", "read")] = (lambda i, paths=paths: Path(paths[i]).read_bytes(), n)
        cases[("pack", "read")] = (from_pack.reader.read, n)
        cases[("pixels", "read")] = (from_pixels.reader.read, n)
    best: dict[tuple[str, str], float] = {}
    for r in range(rounds):
        for key in (cases if r % 2 == 0 else reversed(list(cases))):
            fn, count = cases[key]
            cpu, _wall = run_pass(fn, count, seeded=False)
            best[key] = min(cpu, best.get(key, cpu))
    print(f"\nimages per CPU-second on one core, best of {rounds} rounds ({len(files)} images; pixels: the pixel "
          "pack of the row's decoder):")
    for what in ("read", "train (pil)", "train (tensor)"):
        f, p, x = best[("files", what)], best[("pack", what)], best[("pixels", what)]
        print(f"  {what:15} files {1 / f:8.0f}   pack {1 / p:8.0f}   pixels {1 / x:8.0f}   pack/files {f / p:5.2f}x"
              f"   pixels/files {f / x:5.2f}x")
    today = best[("files", "train (pil)")]
    print(f"  the training path per core, today's (pil, from the files) -> the pixel pack (tensor): "
          f"{1 / today:.0f} -> {1 / best[('pixels', 'train (tensor)')]:.0f} images/s, "
          f"{today / best[('pixels', 'train (tensor)')]:.2f}x")


# ---- main ---------------------------------------------------------------------------------------------

def pin_one_core() -> int:
    cpu = sorted(os.sched_getaffinity(0))[-1]
    os.sched_setaffinity(0, {cpu})
    torch.set_num_threads(1)
    return cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=2000, help="files to make or read (1 to 100,000)")
    ap.add_argument("--data", type=Path, help="read JPEG/PNG files under this directory instead of making them")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (1 to 20)")
    ap.add_argument("--cached", type=int, default=300,
                    help="images decoded beforehand to time the transforms alone (1 to 1,000: 0.6 MB each, per path)")
    ap.add_argument("--val-box", action="store_true", help="also compare the resize-only-the-centre-box order")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--batch", type=int, default=128, help="--device-decoder: files decoded per call")
    ap.add_argument("--device-decoder", action="store_true",
                    help="instead: the device decoder's path on --device (implied by --device cuda)")
    ap.add_argument("--packed", action="store_true",
                    help="instead: read + decode + train from a shard pack and from pixel packs (aiperf-runner stage, "
                         "stage --decoded) against the files")
    args = ap.parse_args(argv)
    if not 1 <= args.images <= 100_000 or not 1 <= args.rounds <= 20 or args.batch < 1 or \
            not 1 <= args.cached <= 1000:
        ap.error("--images 1 to 100,000, --rounds 1 to 20, --cached 1 to 1,000, --batch at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here (torch.cuda.is_available() is False)")
    with tempfile.TemporaryDirectory(prefix="aiperf-data-path-") as tmp:
        if args.data:
            files = find_images(args.data, args.images)
        else:
            t0 = time.perf_counter()
            files = make_jpegs(Path(tmp), args.images)
            print(f"made {len(files)} JPEGs of {JPEG_SIZE[0]}x{JPEG_SIZE[1]} in {time.perf_counter() - t0:.0f} s")
        sizes = [os.path.getsize(p) for p in files]
        print(f"{len(files)} files, mean {np.mean(sizes) / 1e3:.1f} kB (min {min(sizes) / 1e3:.0f}, "
              f"max {max(sizes) / 1e3:.0f})")
        if args.device == "cuda" or args.device_decoder:
            device_bench(files, args.batch, args.rounds, torch.device(args.device))
            return 0
        if args.packed:
            packed_bench(files, Path(tmp), args.rounds)
            return 0
        print(f"pinned to CPU {pin_one_core()}, 1 torch thread; {args.rounds} rounds")
        cached = min(len(files), args.cached)
        report(measure(files, args.rounds, cached), len(files), cached)
        differences(files, args.val_box)
    return 0


if __name__ == "__main__":
    sys.exit(main())
