"""Images/s of the trial program's training loop against a plain PyTorch loop (target ratio >= 0.95).

Side by side in this process, on the same model (the preset's seed architecture) and the same data
(`--preset smoke`: the generated smoke set; `--preset fashion-mnist`: Fashion-MNIST's training
images, memory-mapped and augmented with random crop + flip as in a trial), same loader, same
batches, same memory format (`--memory-format`, default channels_last as trials use):

  plain    for x, y in loader: normalise (the same Normalizer), forward, cross-entropy, zero_grad,
           backward, step
  harness  aiperf_runner.train.trial.train_one_epoch with every hook it really runs: per-iteration
           learning-rate schedule, autocast context and GradScaler (pass-through at fp32), label
           smoothing, device-side loss accumulation, sample counting

Short epochs alternate plain/harness in ABBA order after one untimed warm-up epoch each. The
headline ratio is the median over pairs of harness images/s / plain images/s (a burst of other
load on the machine spoils one pair, not the figure); the ratio of the means and the ratio of
images per CPU-second (process time; steadier on a shared machine with --threads 1) are printed
beside it. The per-epoch extras of the trial program (validation aside: the checkpoint write
and the event-log line, both fsync'ed) are timed separately and shown as a fraction of an epoch.

    python bench/harness_overhead.py                  # defaults: smoke, 32x32, batch 64, 384 images/epoch, 12 pairs
    python bench/harness_overhead.py --pairs 4 --train-images 256 --threads 0
    python bench/harness_overhead.py --preset fashion-mnist   # 28x28x1, batch 128, 7,680 real images/epoch
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from aiperf_runner.data.presets import get_preset  # noqa: E402
from aiperf_runner.search.hparams import defaults  # noqa: E402
from aiperf_runner.spec.eventlog import EventWriter  # noqa: E402
from aiperf_runner.spec.records import EpochEnd  # noqa: E402
from aiperf_runner.spec.seeds import seed_for_preset, small_resnet  # noqa: E402
from aiperf_runner.train.builder import build_module  # noqa: E402
from aiperf_runner.train.data import DataSpec, TensorLoader, TrialData, build_data  # noqa: E402
from aiperf_runner.train.precision import setup_precision  # noqa: E402
from aiperf_runner.train.trial import CosineSchedule, save_checkpoint, train_one_epoch  # noqa: E402
from torch import nn  # noqa: E402

TARGET = 0.95


def fashion_mnist_data(train_images: int, batch_size: int, channels_last: bool) -> TrialData:
    """The first `train_images` of Fashion-MNIST's training set, loaded and augmented as a trial does."""
    spec = DataSpec("fashion-mnist", 10, 28, channels=1)
    full = build_data(spec, batch_size=batch_size, shuffle_seed=0, channels_last=channels_last)
    assert isinstance(full.train, TensorLoader)
    n = min(train_images, full.train_size)
    sampler = torch.utils.data.DistributedSampler(range(n), num_replicas=1, rank=0, shuffle=True, seed=0)
    train = TensorLoader(full.train.images[:n], full.train.labels[:n], batch_size, sampler, drop_singleton=True,
                         augment=full.train.augment)
    return TrialData(train, full.val, n, full.val_size, full.normalizer)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=("smoke", "fashion-mnist"), default="smoke")
    ap.add_argument("--train-images", type=int, default=None, help="images per timed epoch "
                                                                   "(default: smoke 384, fashion-mnist 7,680)")
    ap.add_argument("--image-size", type=int, default=32, help="smoke only (fashion-mnist is 28x28)")
    ap.add_argument("--batch-size", type=int, default=None, help="default: smoke 64, fashion-mnist the preset's 128")
    ap.add_argument("--memory-format", choices=("channels_last", "contiguous"), default="channels_last",
                    help="of the model and the batches, on both sides (trials use channels_last)")
    ap.add_argument("--pairs", type=int, default=12, help="ABBA pairs of timed epochs")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: steadiest, and the loop's own cost weighs most; 0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    torch.manual_seed(0)
    channels_last = args.memory_format == "channels_last"
    fashion = args.preset == "fashion-mnist"
    if fashion:
        args.train_images = args.train_images or 7_680
        args.batch_size = args.batch_size or int(defaults("fashion-mnist")["batch_size"])
        args.image_size = 28
        data = fashion_mnist_data(args.train_images, args.batch_size, channels_last)
        graph = seed_for_preset("fashion-mnist")
    else:
        args.train_images = args.train_images or 384
        args.batch_size = args.batch_size or 64
        spec = DataSpec("smoke", 10, args.image_size, train_images=args.train_images, val_images=10)
        data = build_data(spec, batch_size=args.batch_size, device=device, shuffle_seed=0, channels_last=channels_last)
        graph = small_resnet(10, args.image_size)
    epoch_images = int(get_preset(args.preset).dataset(None)["train_images"])
    init = build_module(graph).state_dict()
    memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def fresh() -> tuple[nn.Module, torch.optim.Optimizer]:
        model = build_module(graph)
        model.load_state_dict(init)
        model.to(memory_format=memory_format)
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)

    # ---- plain --------------------------------------------------------------------------------
    p_model, p_opt = fresh()
    normalize = data.normalizer  # the same uint8 -> float preparation as the harness: only the loop differs

    def plain_epoch(epoch: int) -> int:
        p_model.train()
        data.train.set_epoch(epoch)
        n = 0
        for x, y in data.train:
            x = normalize(x)
            loss = F.cross_entropy(p_model(x), y)
            p_opt.zero_grad()
            loss.backward()
            p_opt.step()
            n += y.shape[0]
        loss.item()
        return n

    # ---- harness ------------------------------------------------------------------------------
    h_model, h_opt = fresh()
    precision = setup_precision("fp32", device)
    scaler = precision.make_scaler()
    schedule = CosineSchedule(h_opt, 0.05, 100)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)

    def harness_epoch(epoch: int) -> int:
        totals = train_one_epoch(h_model, criterion, h_opt, data, precision, scaler, schedule, epoch, device)
        totals.loss_sum.item()
        return totals.samples

    sides = {"plain": plain_epoch, "harness": harness_epoch}
    rates: dict[str, list[float]] = {"plain": [], "harness": []}
    cpu_rates: dict[str, list[float]] = {"plain": [], "harness": []}
    print(f"{args.preset}: seed {len(graph.layers)} layers, input {'x'.join(map(str, graph.input_shape))}, "
          f"batch {args.batch_size}, {args.train_images} images/epoch{' (augmented)' if fashion else ''}, "
          f"{args.memory_format}, {torch.get_num_threads()} thread(s), torch {torch.__version__}")
    for fn in sides.values():  # warm-up (allocator, kernels), untimed
        fn(0)
    epoch = 1
    for pair in range(args.pairs):
        order = ("plain", "harness") if pair % 2 == 0 else ("harness", "plain")
        for name in order:
            t0, c0 = time.perf_counter(), time.process_time()
            n = sides[name](epoch)
            rates[name].append(n / (time.perf_counter() - t0))
            cpu_rates[name].append(n / (time.process_time() - c0))
            epoch += 1
        print(f"  pair {pair + 1}: plain {rates['plain'][-1]:7.1f} img/s   harness {rates['harness'][-1]:7.1f} img/s   "
              f"ratio {rates['harness'][-1] / rates['plain'][-1]:.3f}   (CPU-time ratio "
              f"{cpu_rates['harness'][-1] / cpu_rates['plain'][-1]:.3f})")

    # Per-epoch extras of the trial program: checkpoint (atomic, fsync'ed) and one event line.
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        save_checkpoint(Path(tmp) / "checkpoint.pt", {"model": h_model.state_dict(), "optimizer": h_opt.state_dict()})
        with EventWriter(Path(tmp) / "events.jsonl") as w:
            w.append("epoch_end", **EpochEnd(trial="t0000", attempt=1, epoch=1, images_trained=1, images_evaluated=1,
                                             val_accuracy=0.5, val_loss=1.0, started_at=0.0, ended_at=1.0,
                                             seconds=1.0).as_event())
        extras = time.perf_counter() - t0

    plain = statistics.fmean(rates["plain"])
    harness = statistics.fmean(rates["harness"])
    pair_ratios = [h / p for h, p in zip(rates["harness"], rates["plain"], strict=True)]
    ratio = statistics.median(pair_ratios)
    cpu_ratio = statistics.fmean(cpu_rates["harness"]) / statistics.fmean(cpu_rates["plain"])
    epoch_s = epoch_images / harness  # a preset's epoch at the harness's speed
    print(f"plain   {plain:8.1f} img/s (mean of {len(rates['plain'])} epochs)")
    print(f"harness {harness:8.1f} img/s")
    print(f"ratio harness/plain: {ratio:.3f} (median of {len(pair_ratios)} pairs; target >= {TARGET})")
    print(f"  ratio of the means {harness / plain:.3f}; images per CPU-second ratio {cpu_ratio:.3f}")
    print(f"per-epoch checkpoint + event line: {extras * 1000:.1f} ms = {extras / epoch_s:.2%} of a {args.preset} "
          f"epoch's training ({epoch_s:.2f} s for {epoch_images:,} images)")
    return 0 if ratio >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
