"""How far the AIPerf-LLM audit's re-evaluation may differ from an honest trial's logged loss: the measurements
behind `spec.llmrules.AUDIT_LOSS_TOLERANCE`.

Trains a few models with the runner's own trainer (train/llm/trainer.py) on CPU, then evaluates each with the
frozen evaluation the audit uses, and prints each figure's difference from the fp32 evaluation on 2 threads:

- `fp32_t1`, `fp32_t2`: fp32 on 1 and 2 threads (a trial's rank runs AIPERF_THREADS_PER_RANK, the audit all);
- `fp32_b1`, `fp32_b7`, `fp32_b64`: batches of 1, 7 and 64 windows (a data-parallel trainer's ranks see
  other batch compositions);
- `bf16`: the evaluation under bf16 autocast (CPU autocast standing in for a GPU trainer's, whose logged loss
  is bf16) against the audit's fp32.

Models: llm-smoke's seed after 40 and 300 steps (the second trained under bf16 too), llm-kjv's seed after 150
steps, and a 4-block model of 8 heads and 1024-wide MLPs on llm-kjv (`--quick`: the first only).

    python bench/llm_audit_tolerance.py [--quick]

Bounded: about 15 minutes on a busy 2-core machine (training on 1 thread); --quick, 1 minute.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from unittest import mock

import torch
from aiperf_runner.spec.llmflops import LlmArch, LlmLayer
from aiperf_runner.spec.llmrules import AUDIT_LOSS_TOLERANCE, llm_preset
from aiperf_runner.train.llm import trainer
from aiperf_runner.train.llm.trainer import Budget, LlmHparams, evaluate, new_session, train
from aiperf_runner.train.llm.trialmain import preset_data


@contextlib.contextmanager
def bf16(enabled: bool = True) -> Iterator[None]:
    """The trainer's autocast as on CUDA (bf16), here on the CPU."""
    if not enabled:
        yield
        return
    with mock.patch.object(trainer, "_autocast", lambda device: torch.autocast("cpu", dtype=torch.bfloat16)):
        yield


def measure(preset_name: str, arch: LlmArch, steps: int, bf16_train: bool = False) -> dict[str, float]:
    data = preset_data(llm_preset(preset_name))
    hp = LlmHparams(batch_tokens=arch.seq_len * 16)
    session = new_session(arch, hp, seed=1)
    torch.set_num_threads(1)
    with bf16(bf16_train):
        train(session, data.train, hp, Budget(steps=steps), seed=1)
    out = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        out[f"fp32_t{threads}"] = evaluate(session.model, data.val)
    for batch in (1, 7, 64):
        out[f"fp32_b{batch}"] = evaluate(session.model, data.val, batch=batch)
    with bf16():
        out["bf16"] = evaluate(session.model, data.val)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one model only")
    args = ap.parse_args()
    smoke, kjv = llm_preset("llm-smoke").seed_arch, llm_preset("llm-kjv").seed_arch
    wide = LlmArch(vocab=256, d_model=128, seq_len=128, layers=(LlmLayer(8, 32, 1024),) * 4)
    cases = [("llm-smoke", smoke, 40, False), ("llm-smoke", smoke, 300, False), ("llm-smoke", smoke, 300, True),
             ("llm-kjv", kjv, 150, False), ("llm-kjv", wide, 80, True)]
    worst = 0.0
    for preset, arch, steps, bf16_train in cases[:1] if args.quick else cases:
        started = time.perf_counter()
        out = measure(preset, arch, steps, bf16_train)
        ref = out["fp32_t2"]
        worst = max(worst, *(abs(v - ref) for v in out.values()))
        print(f"{preset} {len(arch.layers)} blocks, {steps} steps ({'bf16' if bf16_train else 'fp32'} training): "
              f"loss {ref:.5f}; " + ", ".join(f"{k} {v - ref:+.2e}" for k, v in out.items())
              + f" ({time.perf_counter() - started:.0f} s)", flush=True)
    print(f"largest difference {worst:.2e} nats; AUDIT_LOSS_TOLERANCE {AUDIT_LOSS_TOLERANCE:g} "
          f"({AUDIT_LOSS_TOLERANCE / worst:.0f}x)" if worst else "all equal")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
