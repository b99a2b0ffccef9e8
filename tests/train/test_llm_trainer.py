"""AIPerf-LLM's second slice: llm-smoke text of known entropy (data/llmtext.py) and one trial's training
(train/llm/trainer.py): a 2-layer model learns the text towards its entropy floor; growths in the middle of
training keep the loss on a fixed probe batch and training goes on improving; two DDP processes end with
the same weights and count the tokens of both.

Budgets are in steps, not seconds, so that what a test checks does not depend on how busy the machine is.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from aiperf_runner.data import llmtext
from aiperf_runner.spec.llmflops import LlmArch, LlmLayer, train_flops
from aiperf_runner.train.distenv import free_port
from aiperf_runner.train.llm.model import LlmModel
from aiperf_runner.train.llm.morph import add_heads, function_gap, insert_block, widen_mlp
from aiperf_runner.train.llm.trainer import (
    Budget,
    LlmHparams,
    byte_tensor,
    eval_windows,
    evaluate,
    grow,
    lr_at,
    new_session,
    random_windows,
    rank_generator,
    train,
)

SEED = 0
# SHA-256 of the first 4096 bytes of llm-smoke seed 0's train split, and of its transition table: any
# change to the generator changes the text every result was trained and validated on.
TRAIN_4K_SHA256 = "8f4981c44f06f5a9d6f36a4b356fa4d6dd6053effb1955b379fbde3bd82048cc"
TABLE_SHA256 = "ab1c81f6ba70c89aca2e74bc1dd951206a226a23d95f9b88ca8e6b51c7b0e65a"

ARCH = LlmArch(vocab=256, d_model=64, seq_len=64, layers=(LlmLayer(4, 16, 128),) * 2)
HP = LlmHparams(lr=1e-2, warmup_steps=20, weight_decay=0.1, batch_tokens=2048)
VAL_BYTES = 32768


@pytest.fixture(scope="module")
def text() -> llmtext.TextData:
    return llmtext.smoke_text(SEED, val_bytes=VAL_BYTES)


@pytest.fixture(scope="module")
def source() -> llmtext.MarkovSource:
    return llmtext.markov_source(SEED)


# ---- the text ---------------------------------------------------------------------------------------

def test_same_seed_same_bytes() -> None:
    a = llmtext.generate(4096, SEED, "train")
    assert a == llmtext.generate(4096, SEED, "train")
    assert llmtext.sha256(a) == TRAIN_4K_SHA256
    assert llmtext.sha256(llmtext.markov_source(SEED).weights.astype("<i8").tobytes()) == TABLE_SHA256
    assert llmtext.generate(8192, SEED, "train")[:4096] == a  # a longer text extends a shorter one
    assert llmtext.generate(4096, SEED, "val") != a
    assert llmtext.generate(4096, SEED + 1, "train") != a
    assert set(a) <= set(llmtext.ALPHABET)


def test_entropy_rate_is_known_and_matches_the_text(source: llmtext.MarkovSource) -> None:
    h = source.entropy_rate_nats()
    order1 = source.block_entropy_nats(2) - source.block_entropy_nats(1)
    unigram = source.unigram_entropy_nats()
    print(f"\nentropy rate {h:.4f} nats ({llmtext.nats_to_bits(h):.3f} bits/byte); order-1 {order1:.4f}; "
          f"unigram {unigram:.4f}; ln 32 = {math.log(32):.4f}")
    assert 0 < h < order1 < unigram <= math.log(32)
    assert h == llmtext.entropy_rate_nats(SEED)
    # pi is stationary: one step of the chain leaves it where it is
    p = source.weights / llmtext.TOTAL
    k = len(llmtext.ALPHABET)
    moved = (source.stationary[:, None] * p).reshape(k, -1, k).sum(axis=0).reshape(-1)
    np.testing.assert_allclose(moved, source.stationary, rtol=0, atol=1e-15)

    x = llmtext.to_symbols(llmtext.generate(1 << 20, SEED, "probe")).astype(np.int64)
    ctx, nxt = x[:-2] * k + x[1:-1], x[2:]
    # the true model's loss on a long sample: an unbiased estimate of H (std error ~1e-3 here)
    assert abs(-np.log(p[ctx, nxt]).mean() - h) < 0.01
    # counts alone, not the table: the plug-in conditional entropy (biased low by about cells / 2n)
    counts = np.bincount(ctx * k + nxt, minlength=k ** 3).reshape(k * k, k).astype(np.float64)
    cond = np.where(counts > 0, counts / np.maximum(counts.sum(axis=1, keepdims=True), 1), 1.0)
    plug_in = float(-(counts * np.log(cond)).sum() / counts.sum())
    assert abs(plug_in - h) < 0.03
    freq = np.bincount(x, minlength=k) / len(x)
    np.testing.assert_allclose(freq, source.stationary.reshape(k, k).sum(axis=1), atol=3e-3)


def test_window_floor(source: llmtext.MarkovSource) -> None:
    h, unigram = source.entropy_rate_nats(), source.unigram_entropy_nats()
    order1 = source.block_entropy_nats(2) - source.block_entropy_nats(1)
    assert source.window_floor_nats(1) == pytest.approx(unigram)
    assert source.window_floor_nats(64) == pytest.approx((unigram + order1 + 62 * h) / 64)
    assert h < source.window_floor_nats(64) < source.window_floor_nats(16)


def test_corpus_split(tmp_path: Path) -> None:
    f = tmp_path / "corpus.txt"
    f.write_bytes(bytes(range(200)) * 5)
    data = llmtext.read_corpus(f)
    assert data.train + data.val == f.read_bytes() and len(data.val) == 50
    assert data.val_sha256 == llmtext.sha256(data.val) and data.floor_nats is None
    with pytest.raises(llmtext.TextError):
        llmtext.read_corpus(tmp_path / "missing.txt")


# ---- the frozen evaluation and the schedule ---------------------------------------------------------

def test_eval_windows_cover_every_target_once() -> None:
    for n, t in ((100, 8), (97, 8), (9, 8), (2, 8)):
        targets = [s + 1 + j for s, m in eval_windows(n, t) for j in range(m)]
        assert targets == list(range(1, n)), (n, t)


def test_evaluate_is_the_mean_over_targets(text: llmtext.TextData) -> None:
    session = new_session(ARCH, HP, seed=1)
    val = text.val[:1000]  # 15 full windows and a short one
    got = evaluate(session.model, val, batch=4)
    assert got == pytest.approx(evaluate(session.model, val, batch=64), abs=1e-6)
    buf = byte_tensor(val)
    total = 0.0
    with torch.no_grad():
        for s, m in eval_windows(len(val), ARCH.seq_len):
            w = buf[s:s + m + 1].long()[None]
            total += float(F.cross_entropy(session.model(w[:, :-1])[0], w[0, 1:], reduction="sum"))
    assert got == pytest.approx(total / (len(val) - 1), abs=1e-5)


def test_ranks_draw_their_own_windows() -> None:
    buf = byte_tensor(llmtext.generate(4096, SEED, "train"))
    draw = [random_windows(buf, 16, 4, rank_generator(SEED, r))[0] for r in (0, 1, 0)]
    assert torch.equal(draw[0], draw[2]) and not torch.equal(draw[0], draw[1])
    x, y = random_windows(buf, 16, 4, rank_generator(SEED, 0))
    assert torch.equal(x[:, 1:], y[:, :-1])  # the target is the input shifted by one byte


def test_schedule() -> None:
    assert lr_at(HP, 0, 0.0, (0, 1)) == pytest.approx(HP.lr / HP.warmup_steps)
    assert lr_at(HP, 100, 0.0, (0, 1)) == pytest.approx(HP.lr)
    assert lr_at(HP, 100, 1.0, (0, 1)) == pytest.approx(HP.lr * HP.min_lr_ratio)
    assert lr_at(HP, 100, 0.0, (0.5, 1)) == pytest.approx(lr_at(HP, 100, 0.5, (0, 1)))


# ---- training -------------------------------------------------------------------------------------

def _probe(seq_len: int) -> torch.Tensor:
    """A fixed batch of llm-smoke's probe split: the function check's input."""
    return byte_tensor(llmtext.generate(8 * (seq_len + 1), SEED, "probe")).long().view(8, seq_len + 1)


def _probe_loss(model: LlmModel, probe: torch.Tensor) -> float:
    was = model.training
    model.eval()
    with torch.no_grad():
        logits = model(probe[:, :-1])
    model.train(was)
    return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), probe[:, 1:].reshape(-1)))


@pytest.mark.slow
def test_two_layer_model_approaches_the_entropy_floor(text: llmtext.TextData, source: llmtext.MarkovSource) -> None:
    session = new_session(ARCH, HP, seed=SEED)
    before = evaluate(session.model, text.val)
    r = train(session, text.train, HP, Budget(steps=600), seed=SEED, val=text.val)
    unigram = source.unigram_entropy_nats()
    order1 = source.block_entropy_nats(2) - source.block_entropy_nats(1)
    floor = source.window_floor_nats(ARCH.seq_len)
    print(f"\n600 steps, {r.train_tokens} tokens in {r.seconds:.1f} s ({r.tokens_per_s:.0f} tokens/s, "
          f"{r.flops_per_s / 1e9:.1f} GFLOP/s): val loss {before:.3f} -> {r.val_loss:.3f} nats; unigram "
          f"{unigram:.3f}, order-1 {order1:.3f}, frozen-evaluation floor {floor:.3f} (entropy rate "
          f"{source.entropy_rate_nats():.3f})")
    assert r.steps == 600 and r.train_tokens == 600 * HP.batch_tokens
    assert r.flops == 600 * train_flops(ARCH, [ARCH.seq_len] * (HP.batch_tokens // ARCH.seq_len))
    assert r.val_loss is not None
    assert r.val_loss < unigram - 1.5       # well below a context-free model
    assert r.val_loss < order1 - 1.0        # it uses the byte two back: attention learnt the order-2 source
    assert floor - 0.01 < r.val_loss < floor + 0.4


@pytest.mark.slow
def test_growth_mid_training_keeps_the_loss_and_keeps_learning(text: llmtext.TextData) -> None:
    session = new_session(ARCH, HP, seed=SEED)
    probe = _probe(ARCH.seq_len)
    gen = torch.Generator().manual_seed(SEED)
    first = train(session, text.train, HP, Budget(steps=150), seed=0, val=text.val, span=(0, 0.25))
    losses = [first.val_loss]
    growths = (lambda m, a: insert_block(m, a, len(a.layers), generator=gen),
               lambda m, a: widen_mlp(m, a, 0, 192, generator=gen),
               lambda m, a: add_heads(m, a, 1, 2, generator=gen))
    for i, make in enumerate(growths, 1):
        g = make(session.model, session.arch)
        gap = function_gap(session.model, g.model, probe[:, :-1])
        loss_before, loss_after = _probe_loss(session.model, probe), _probe_loss(g.model, probe)
        session = grow(session, g, HP)
        assert gap <= 1e-5 and abs(loss_after - loss_before) <= 1e-5, (g.kind, gap, loss_before, loss_after)
        assert len(session.optimizer.state) > 0  # the moments came along
        r = train(session, text.train, HP, Budget(steps=100), seed=i, val=text.val, span=(i / 4, (i + 1) / 4))
        losses.append(r.val_loss)
        print(f"\n{g.kind}: probe loss {loss_before:.6f} -> {loss_after:.6f} (logit gap {gap:.1e}); "
              f"val loss after 100 more steps {r.val_loss:.3f}")
    assert session.growths == ["insert_block", "widen_mlp", "add_heads"]
    assert session.arch.layers == (LlmLayer(4, 16, 192), LlmLayer(6, 16, 128), LlmLayer(4, 16, 128))
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses


# ---- data parallel ----------------------------------------------------------------------------------

DDP_HP = LlmHparams(lr=1e-2, warmup_steps=5, batch_tokens=1024)


def _ddp_run(rank: int, out: Path) -> None:
    text = llmtext.smoke_text(SEED, train_bytes=1 << 16, val_bytes=4096)
    arch = LlmArch(256, 32, 32, (LlmLayer(2, 16, 64),) * 2)
    session = new_session(arch, DDP_HP, seed=SEED)
    first = train(session, text.train, DDP_HP, Budget(steps=15), seed=0, val=text.val, span=(0, 0.5))
    g = insert_block(session.model, arch, 1, generator=torch.Generator().manual_seed(rank))  # unequal on purpose
    session = grow(session, g, DDP_HP)
    second = train(session, text.train, DDP_HP, Budget(seconds=1.5), seed=1, val=text.val, span=(0.5, 1))
    torch.save({"params": {n: p.detach().clone() for n, p in session.model.named_parameters()},
                "results": [first, second]}, out / f"rank{rank}.pt")


def _ddp_worker(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        _ddp_run(rank, Path(out))
    finally:
        dist.destroy_process_group()
    os._exit(0)  # as the trial program does: gloo's threads can abort interpreter finalisation


@pytest.mark.slow
def test_ddp_two_processes_end_equal_and_count_both(tmp_path: Path) -> None:
    mp.start_processes(_ddp_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    a, b = ranks[0]["params"], ranks[1]["params"]
    assert list(a) == list(b) and len(a) == 9 * 3 + 3  # three blocks after the growth
    for name in a:
        assert torch.equal(a[name], b[name]), name
    first, second = ranks[0]["results"]
    other = ranks[1]["results"]
    assert [x.steps for x in other] == [first.steps, second.steps]  # rank 0's clock decided for both
    assert [x.train_tokens for x in other] == [first.train_tokens, second.train_tokens]
    assert [x.val_loss for x in other] == pytest.approx([first.val_loss, second.val_loss], abs=1e-6)
    assert first.steps == 15 and first.train_tokens == 15 * DDP_HP.batch_tokens  # 512 a rank, summed
    assert second.steps > 0 and second.train_tokens == second.steps * DDP_HP.batch_tokens
    assert second.val_loss < first.val_loss
