"""train/llm/morph.py: every growth keeps the parent's function, says its new architecture, grows the
spec's FLOPs as its formula says, carries the optimizer state over, and leaves new weights that learn."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch
from aiperf_runner.spec.llmflops import LlmArch, LlmArchError, LlmLayer, causal_pairs, forward_flops_per_sequence
from aiperf_runner.train.llm.model import LlmModel, build_model
from aiperf_runner.train.llm.morph import (
    Growth,
    add_heads,
    carry_optimizer_state,
    function_gap,
    insert_block,
    widen_mlp,
)

SEEDS = range(6)


def random_arch(rng: random.Random) -> LlmArch:
    layers = tuple(LlmLayer(rng.randint(1, 3), 2 * rng.randint(2, 6), rng.randint(8, 32))
                   for _ in range(rng.randint(1, 3)))
    return LlmArch(rng.randint(16, 61), rng.randint(8, 32), rng.randint(4, 16), layers)


def parent(seed: int) -> tuple[LlmModel, LlmArch, torch.Generator, torch.Tensor]:
    rng = random.Random(seed)
    arch = random_arch(rng)
    gen = torch.Generator().manual_seed(seed)
    # a larger std than the default, so that a wrong growth would show in the logits
    model = build_model(arch, std=0.3, generator=gen, dtype=torch.float64)
    tokens = torch.randint(0, arch.vocab, (3, arch.seq_len), generator=gen)
    return model, arch, gen, tokens


def grow(kind: str, model: LlmModel, arch: LlmArch, gen: torch.Generator, rng: random.Random) -> Growth:
    layer = rng.randrange(len(arch.layers))
    if kind == "insert_block":
        return insert_block(model, arch, rng.randint(0, len(arch.layers)), generator=gen, std=0.3)
    if kind == "widen_mlp":
        return widen_mlp(model, arch, layer, arch.layers[layer].mlp_hidden + rng.randint(1, 16), generator=gen,
                         std=0.3)
    return add_heads(model, arch, layer, rng.randint(1, 3), generator=gen, std=0.3)


KINDS = ("insert_block", "widen_mlp", "add_heads")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_growth_preserves_the_function(kind: str, seed: int) -> None:
    model, arch, gen, tokens = parent(seed)
    g = grow(kind, model, arch, gen, random.Random(seed))
    assert g.kind == kind and g.model.arch == g.arch
    before, after = model(tokens), g.model(tokens)
    if kind == "insert_block":   # x + 0 + 0: bit-exact
        assert torch.equal(before, after)
    else:                        # zero terms inside a matmul's sums, which a BLAS may regroup
        torch.testing.assert_close(after, before, rtol=0, atol=1e-12)
    assert function_gap(model, g.model, tokens) <= 1e-12
    assert any(p.abs().max() > 0 for p in g.model.parameters())  # not a trivially zero model


@pytest.mark.parametrize("seed", SEEDS)
def test_each_growth_says_its_arch_and_flops(seed: int) -> None:
    model, arch, gen, _ = parent(seed)
    t, d = arch.seq_len, arch.d_model
    base = forward_flops_per_sequence(arch).causal

    g = insert_block(model, arch, 1 if len(arch.layers) > 1 else 0, generator=gen)
    i = 1 if len(arch.layers) > 1 else 0
    copied = arch.layers[max(i - 1, 0)]
    assert g.arch.layers == (*arch.layers[:i], copied, *arch.layers[i:])
    assert forward_flops_per_sequence(g.arch).causal - base == forward_flops_per_sequence(g.arch).per_layer[i].total
    assert len(g.model.blocks) == len(arch.layers) + 1

    w = widen_mlp(model, arch, 0, arch.layers[0].mlp_hidden + 5, generator=gen)
    assert w.arch.layers[0].mlp_hidden == arch.layers[0].mlp_hidden + 5 and w.arch.layers[1:] == arch.layers[1:]
    assert forward_flops_per_sequence(w.arch).causal - base == 3 * 2 * t * d * 5
    assert w.model.blocks[0].mlp.down.weight.shape == (d, arch.layers[0].mlp_hidden + 5)

    h = add_heads(model, arch, 0, 2, generator=gen)
    hd = arch.layers[0].head_dim
    assert h.arch.layers[0].heads == arch.layers[0].heads + 2 and h.arch.layers[0].head_dim == hd
    # q, k, v and o grow by 2*head_dim rows or columns; QK^T and AV by 2 heads' causal pairs
    grown = forward_flops_per_sequence(h.arch).causal - base
    assert grown == 4 * 2 * t * d * (2 * hd) + 2 * 2 * (2 * hd) * causal_pairs(t)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_chain_of_growths_keeps_the_function(seed: int) -> None:
    model, arch, gen, tokens = parent(seed)
    rng = random.Random(100 + seed)
    m, a = model, arch
    for kind in (*KINDS, *KINDS):
        g = grow(kind, m, a, gen, rng)
        m, a = g.model, g.arch
    torch.testing.assert_close(m(tokens), model(tokens), rtol=0, atol=1e-12)


def test_inherited_and_new_weights() -> None:
    model, arch, gen, _ = parent(0)
    a, d = arch.layers[0].attn_dim, arch.d_model
    g = add_heads(model, arch, 0, 1, generator=gen)
    new = g.model.blocks[0].attn
    assert torch.equal(new.q.weight[:a], model.blocks[0].attn.q.weight)
    assert torch.equal(new.o.weight[:, :a], model.blocks[0].attn.o.weight)
    assert torch.count_nonzero(new.o.weight[:, a:]) == 0           # writes nothing into the residual
    assert torch.count_nonzero(new.q.weight[a:]) == new.q.weight[a:].numel()  # random: it can learn
    assert new.q.weight.shape == (a + arch.layers[0].head_dim, d)
    i = insert_block(model, arch, 0, generator=gen)
    assert torch.equal(i.model.blocks[1].mlp.up.weight, model.blocks[0].mlp.up.weight)  # shifted by one
    assert i.mapping["blocks.1.mlp.up.weight"][0] == "blocks.0.mlp.up.weight"
    assert "blocks.0.mlp.up.weight" not in i.mapping                                    # wholly new


def adamw(model: torch.nn.Module) -> torch.optim.AdamW:
    # no weight decay: a weight that moves, moves because of its gradient
    return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, tokens: torch.Tensor) -> None:
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()


@pytest.mark.parametrize("kind", KINDS)
def test_optimizer_state_is_carried_over(kind: str) -> None:
    model, arch, gen, tokens = parent(3)
    opt = adamw(model)
    for _ in range(2):
        step(model, opt, tokens)
    g = grow(kind, model, arch, gen, random.Random(3))
    new_opt = adamw(g.model)
    old_params = dict(model.named_parameters())
    assert carry_optimizer_state(model, g.model, opt, new_opt, g.mapping) == len(g.mapping)
    for name, p in g.model.named_parameters():
        state = new_opt.state.get(p)
        if name not in g.mapping:
            assert not state, f"{name} is wholly new: AdamW starts it afresh"
            continue
        src, region = g.mapping[name]
        old = opt.state[old_params[src]]
        assert torch.equal(state["step"], old["step"])
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(state[key][region], old[key])
            rest = state[key].clone()
            rest[region] = 0
            assert torch.count_nonzero(rest) == 0, f"{name} {key}: new slices start at zero"
    step(g.model, new_opt, tokens)  # the optimizer accepts the carried state


@pytest.mark.parametrize("kind", KINDS)
def test_new_weights_learn(kind: str) -> None:
    model, arch, gen, tokens = parent(4)
    g = grow(kind, model, arch, gen, random.Random(4))
    fresh = {name for name in dict(g.model.named_parameters()) if name not in g.mapping}
    before = {n: p.detach().clone() for n, p in g.model.named_parameters()}
    opt = adamw(g.model)
    step(g.model, opt, tokens)
    after_one = {n: p.detach().clone() for n, p in g.model.named_parameters()}
    step(g.model, opt, tokens)
    after_two = dict(g.model.named_parameters())

    def moved(state: dict[str, torch.Tensor], name: str, region: Callable[[torch.Tensor], torch.Tensor]) -> bool:
        return not torch.equal(region(state[name]), region(before[name]))

    # the zero residual writers move at the first step; the input side once they have, at the second
    writers, readers = _new_regions(kind, g, arch, fresh)
    for name, region in writers:
        assert moved(after_one, name, region), f"{name} did not move at the first step"
    for name, region in readers:
        assert moved(after_two, name, region), f"{name} did not move by the second step"


def _new_regions(kind: str, g: Growth, arch: LlmArch, fresh: set[str]):
    """(writers, readers): (parameter name, the new region as a function of the tensor)."""
    def whole(t: torch.Tensor) -> torch.Tensor:
        return t
    if kind == "insert_block":
        (i,) = {int(n.split(".")[1]) for n in fresh}
        b = f"blocks.{i}."
        return ([(b + "attn.o.weight", whole), (b + "mlp.down.weight", whole)],
                [(b + m + ".weight", whole) for m in ("attn.q", "attn.k", "attn.v", "mlp.gate", "mlp.up")])
    (i,) = [j for j, (x, y) in enumerate(zip(arch.layers, g.arch.layers, strict=True)) if x != y]
    if kind == "widen_mlp":
        h, b = arch.layers[i].mlp_hidden, f"blocks.{i}.mlp."
        return ([(b + "down.weight", lambda t: t[:, h:])],
                [(b + m + ".weight", lambda t: t[h:]) for m in ("gate", "up")])
    a, b = arch.layers[i].attn_dim, f"blocks.{i}.attn."
    # q and k of a new head receive a gradient through its attention weights, v through its output
    return ([(b + "o.weight", lambda t: t[:, a:])], [(b + m + ".weight", lambda t: t[a:]) for m in "qkv"])


def test_refusals() -> None:
    model, arch, gen, _ = parent(0)
    with pytest.raises(LlmArchError, match="must exceed"):
        widen_mlp(model, arch, 0, arch.layers[0].mlp_hidden)
    with pytest.raises(LlmArchError, match="at least one head"):
        add_heads(model, arch, 0, 0)
    with pytest.raises(LlmArchError, match="outside"):
        insert_block(model, arch, len(arch.layers) + 1)
    other = arch.with_layer(0, LlmLayer(1, 4, 9))
    with pytest.raises(ValueError, match="not built from this architecture"):
        widen_mlp(model, other, 0, 20)
