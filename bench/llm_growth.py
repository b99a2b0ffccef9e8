"""Does growing a language model in the middle of training help, for the same wall time? A first comparison on
llm-smoke (data/llmtext.py), not the search: no GP over architectures, no TPE, one process, fixed
hyper-parameters. Three arms, one after the other, each trained for the same `--seconds`:

  seed     the seed 2-layer model (d_model 64, 4 heads of 16, SwiGLU 128, seq_len 64) trained alone
  growth   the same seed, and at each quarter of the budget one growth of each kind in turn, as
           train/llm/morph.py makes them: a block appended (insert_block), block 0's MLP doubled
           (widen_mlp), two heads added to the last block (add_heads); AdamW's moments carried over
  random   growths at the same moments, of random kinds, places and sizes (`--seed`)

Three growths need three moments, so the budget is cut in quarters (the first quarter trains the seed).
Each arm follows one cosine over its budget, with a short warm-up after every growth (trainer.py). The
time of a growth itself and of the evaluations is not in the budget.

    python bench/llm_growth.py                    # 3 x 60 s
    python bench/llm_growth.py --seconds 120 --threads 1 --arms seed,growth

Printed, for each arm: the validation loss by the frozen evaluation (nats per byte) at each growth and at
the end, the architecture it ended with, tokens/s and FLOP/s (spec/llmflops.py's training FLOPs of the
tokens trained, over the training time), and the function check of every growth (the largest change of
the logits on a fixed probe batch); then the text's entropy rate and the frozen evaluation's floor.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "runner"))

import torch  # noqa: E402
from aiperf_runner.data import llmtext  # noqa: E402
from aiperf_runner.spec.llmflops import LlmArch, LlmLayer, train_flops_per_token  # noqa: E402
from aiperf_runner.train.llm.model import LlmModel  # noqa: E402
from aiperf_runner.train.llm.morph import Growth, add_heads, function_gap, insert_block, widen_mlp  # noqa: E402
from aiperf_runner.train.llm.trainer import Budget, LlmHparams, Session, grow, new_session, train  # noqa: E402

SEED_ARCH = LlmArch(vocab=256, d_model=64, seq_len=64, layers=(LlmLayer(4, 16, 128),) * 2)
HP = LlmHparams(lr=1e-2, warmup_steps=20, weight_decay=0.1, batch_tokens=2048)
KINDS = ("insert_block", "widen_mlp", "add_heads")
Grower = Callable[[LlmModel, LlmArch, torch.Generator], Growth]


def planned(kind: str) -> Grower:
    """The growth arm's growth of `kind`."""
    if kind == "insert_block":
        return lambda m, a, g: insert_block(m, a, len(a.layers), generator=g)
    if kind == "widen_mlp":
        return lambda m, a, g: widen_mlp(m, a, 0, 2 * a.layers[0].mlp_hidden, generator=g)
    return lambda m, a, g: add_heads(m, a, len(a.layers) - 1, 2, generator=g)


def random_growth(rng: random.Random) -> Grower:
    """A growth of a random kind at a random place, of a random size."""
    kind = rng.choice(KINDS)

    def make(m: LlmModel, a: LlmArch, g: torch.Generator) -> Growth:
        layer = rng.randrange(len(a.layers))
        if kind == "insert_block":
            return insert_block(m, a, rng.randint(0, len(a.layers)), generator=g)
        if kind == "widen_mlp":
            hidden = a.layers[layer].mlp_hidden
            return widen_mlp(m, a, layer, hidden + rng.randint(hidden // 4, hidden), generator=g)
        return add_heads(m, a, layer, rng.randint(1, 4), generator=g)

    return make


def probe_batch(seed: int) -> torch.Tensor:
    data = llmtext.generate(8 * SEED_ARCH.seq_len, seed, "probe")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long().view(8, SEED_ARCH.seq_len)


def describe(arch: LlmArch) -> str:
    return " | ".join(f"{x.heads}x{x.head_dim} h{x.mlp_hidden}" for x in arch.layers)


def run_arm(name: str, growers: list[Grower], text: llmtext.TextData, seconds: float, seed: int) -> dict[str, float]:
    """Train the seed for `seconds`, in len(growers) + 1 equal parts with a growth between parts."""
    parts = len(growers) + 1
    session: Session = new_session(SEED_ARCH, HP, seed=seed)
    gen, probe = torch.Generator().manual_seed(seed), probe_batch(seed)
    tokens = flops = 0
    train_s = 0.0
    val = float("nan")
    for part in range(parts):
        if part:
            g = growers[part - 1](session.model, session.arch, gen)
            gap = function_gap(session.model, g.model, probe)
            session = grow(session, g, HP)
            print(f"  {name:7s} growth {part}: {g.kind:12s} logit gap {gap:.1e} -> {describe(g.arch)}")
        last = part == parts - 1
        r = train(session, text.train, HP, Budget(seconds=seconds / parts), seed=seed * 100 + part,
                  val=text.val, span=(part / parts, (part + 1) / parts))
        tokens, flops, train_s = tokens + r.train_tokens, flops + r.flops, train_s + r.seconds
        val = r.val_loss if r.val_loss is not None else val
        print(f"  {name:7s} part {part + 1}/{parts}: {r.steps:5d} steps, val loss {val:.4f}"
              f"{'  (end)' if last else ''}")
    per_token = train_flops_per_token(session.arch).train
    print(f"{name:7s} val loss {val:.4f} nats | {tokens / train_s:9.0f} tokens/s | {flops / train_s / 1e9:6.2f} "
          f"GFLOP/s | {tokens} tokens | ends {describe(session.arch)} ({per_token} FLOP/token)")
    return {"val_loss": val, "tokens_per_s": tokens / train_s, "flops_per_s": flops / train_s}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="training time of each arm (default 60)")
    ap.add_argument("--arms", default="seed,growth,random", help="comma-separated: seed, growth, random")
    ap.add_argument("--seed", type=int, default=0, help="the text's, the models' and the random arm's seed")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    text = llmtext.smoke_text(args.seed)
    source = llmtext.markov_source(args.seed)
    print(f"llm-smoke seed {args.seed}: {len(text.train)} train / {len(text.val)} val bytes "
          f"(generated in {time.perf_counter() - t0:.1f} s), train sha256 {text.train_sha256[:16]}; "
          f"{args.seconds:g} s an arm, {torch.get_num_threads()} thread(s)")
    rng = random.Random(args.seed)
    arms: dict[str, list[Grower]] = {"seed": [], "growth": [planned(k) for k in KINDS],
                                     "random": [random_growth(rng) for _ in KINDS]}
    results = {}
    for name in args.arms.split(","):
        if name not in arms:
            ap.error(f"unknown arm {name!r}")
        results[name] = run_arm(name, arms[name], text, args.seconds, args.seed)
    floor = source.window_floor_nats(SEED_ARCH.seq_len)
    print(f"entropy rate {source.entropy_rate_nats():.4f} nats/byte; frozen-evaluation floor "
          f"(seq_len {SEED_ARCH.seq_len}) {floor:.4f}; unigram {source.unigram_entropy_nats():.4f}")
    for name, r in results.items():
        print(f"  {name:7s} above the floor by {r['val_loss'] - floor:.4f} nats")
    return 0


if __name__ == "__main__":
    sys.exit(main())
