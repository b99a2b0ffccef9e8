"""Images/s of the trial program's training loop against a plain PyTorch loop (target ratio >= 0.95).

Side by side in this process, on the same model (small_resnet, the smoke seed) and the same data
(the generated smoke set, same loader, same batches):

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

    python bench/harness_overhead.py                  # defaults: 32x32, batch 64, 384 images/epoch, 12 pairs
    python bench/harness_overhead.py --pairs 4 --train-images 256 --threads 0
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
from aiperf_runner.search.seeds import small_resnet  # noqa: E402
from aiperf_runner.spec.eventlog import EventWriter  # noqa: E402
from aiperf_runner.train.builder import build_module  # noqa: E402
from aiperf_runner.train.data import DataSpec, build_data  # noqa: E402
from aiperf_runner.train.precision import setup_precision  # noqa: E402
from aiperf_runner.train.trial import CosineSchedule, save_checkpoint, train_one_epoch  # noqa: E402
from torch import nn  # noqa: E402

TARGET = 0.95


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train-images", type=int, default=384)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--pairs", type=int, default=12, help="ABBA pairs of timed epochs")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: steadiest, and the loop's own cost weighs most; 0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    torch.manual_seed(0)

    spec = DataSpec("smoke", 10, args.image_size, train_images=args.train_images, val_images=10)
    data = build_data(spec, batch_size=args.batch_size, device=device, shuffle_seed=0)
    graph = small_resnet(10, args.image_size)
    init = build_module(graph).state_dict()

    def fresh() -> tuple[nn.Module, torch.optim.Optimizer]:
        model = build_module(graph)
        model.load_state_dict(init)
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
    print(f"small_resnet {args.image_size}x{args.image_size}, batch {args.batch_size}, {args.train_images} images/epoch, "
          f"{torch.get_num_threads()} thread(s), torch {torch.__version__}")
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
            w.append("epoch_end", trial="t0000", attempt=1, epoch=1, images_trained=1, images_evaluated=1,
                     val_accuracy=0.5, val_loss=1.0, started_at=0.0, ended_at=1.0, seconds=1.0)
        extras = time.perf_counter() - t0

    plain = statistics.fmean(rates["plain"])
    harness = statistics.fmean(rates["harness"])
    pair_ratios = [h / p for h, p in zip(rates["harness"], rates["plain"], strict=True)]
    ratio = statistics.median(pair_ratios)
    cpu_ratio = statistics.fmean(cpu_rates["harness"]) / statistics.fmean(cpu_rates["plain"])
    epoch_s = 2000 / harness  # a smoke-preset epoch (2,000 training images) at the harness's speed
    print(f"plain   {plain:8.1f} img/s (mean of {len(rates['plain'])} epochs)")
    print(f"harness {harness:8.1f} img/s")
    print(f"ratio harness/plain: {ratio:.3f} (median of {len(pair_ratios)} pairs; target >= {TARGET})")
    print(f"  ratio of the means {harness / plain:.3f}; images per CPU-second ratio {cpu_ratio:.3f}")
    print(f"per-epoch checkpoint + event line: {extras * 1000:.1f} ms = {extras / epoch_s:.2%} of a smoke-preset "
          f"epoch's training ({epoch_s:.2f} s for 2,000 images)")
    return 0 if ratio >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
