"""AIPerf-LLM searches: growths, the block-sequence distance, the architecture search (bounds, no repeats,
replayable growths, resume) and the hyper-parameter search (sources by round, bounds, minimising loss)."""

from __future__ import annotations

import hashlib
import math
import random
import subprocess
import sys
import textwrap

import pytest
from aiperf_runner.search.llmsearch import (
    LlmArchitectureSearch,
    LlmProposal,
    apply_growth,
    llm_arch_distance,
    llm_arch_hash,
    replay,
)
from aiperf_runner.spec.llmflops import LlmArch, LlmArchError, LlmLayer, train_flops_per_token


def _arch(*layers: tuple[int, int, int], d_model: int = 64) -> LlmArch:
    return LlmArch(vocab=256, d_model=d_model, seq_len=64, layers=tuple(LlmLayer(*x) for x in layers))


SEED = _arch((2, 32, 128), (2, 32, 128))
BOUNDS = {"max_layers": 5, "max_mlp_hidden": 320, "max_heads_per_layer": 4,
          "max_train_flops_per_token": train_flops_per_token(SEED).train * 3}


def _loss(arch: LlmArch) -> float:
    """A synthetic validation loss: bigger is better, with diminishing returns and a per-arch wobble."""
    params = sum(x.attn_dim * 4 + x.mlp_hidden * 3 for x in arch.layers)
    wobble = int(llm_arch_hash(arch)[:4], 16) / 65536 * 0.05
    return 3.0 - 0.3 * math.log(params) + wobble


# ---- hash and growths ------------------------------------------------------------------------------

def test_hash_is_sha256_of_canonical_json():
    arch = _arch((2, 32, 128))
    text = '{"d_model":64,"layers":[{"head_dim":32,"heads":2,"mlp_hidden":128}],"seq_len":64,"vocab":256}'
    assert llm_arch_hash(arch) == hashlib.sha256(text.encode()).hexdigest()
    assert llm_arch_hash(LlmArch.from_dict(arch.to_dict())) == llm_arch_hash(arch)
    assert llm_arch_hash(_arch((2, 32, 136))) != llm_arch_hash(arch)


def test_apply_growth_each_kind():
    grown = apply_growth(SEED, {"kind": "insert_block", "index": 1, "layer": {"heads": 3, "head_dim": 16,
                                                                             "mlp_hidden": 64}})
    assert grown.layers == (LlmLayer(2, 32, 128), LlmLayer(3, 16, 64), LlmLayer(2, 32, 128))
    assert grown.d_model == SEED.d_model
    assert apply_growth(SEED, {"kind": "insert_block", "index": 2, "layer": SEED.layers[0].to_dict()}).layers[2] \
        == SEED.layers[0]
    assert apply_growth(SEED, {"kind": "widen_mlp", "layer": 1, "new_hidden": 160}).layers[1] == LlmLayer(2, 32, 160)
    assert apply_growth(SEED, {"kind": "add_heads", "layer": 0, "n": 2}).layers[0] == LlmLayer(4, 32, 128)
    assert SEED.layers[0] == LlmLayer(2, 32, 128)  # pure: the input is unchanged


@pytest.mark.parametrize("growth", [
    {"kind": "deepen", "layer": 0},
    {"kind": "widen_mlp", "layer": 0},
    {"kind": "widen_mlp", "layer": 0, "new_hidden": 256, "extra": 1},
    {"kind": "widen_mlp", "layer": 2, "new_hidden": 256},
    {"kind": "widen_mlp", "layer": -1, "new_hidden": 256},
    {"kind": "widen_mlp", "layer": 0, "new_hidden": 128},
    {"kind": "widen_mlp", "layer": 0, "new_hidden": 200.0},
    {"kind": "add_heads", "layer": 0, "n": 0},
    {"kind": "add_heads", "layer": True, "n": 1},
    {"kind": "insert_block", "index": 3, "layer": {"heads": 2, "head_dim": 32, "mlp_hidden": 128}},
    {"kind": "insert_block", "index": 0, "layer": {"heads": 2, "head_dim": 31, "mlp_hidden": 128}},
    {"kind": "insert_block", "index": 0, "layer": {"heads": 2, "head_dim": 32}},
    "widen_mlp",
])
def test_apply_growth_errors(growth):
    with pytest.raises(LlmArchError):
        apply_growth(SEED, growth)


# ---- distance ---------------------------------------------------------------------------------------

def test_distance_identity_symmetry_and_scale():
    rng = random.Random(5)
    archs = [SEED, _arch((2, 32, 128)), _arch((4, 32, 256), (2, 32, 128), (2, 32, 128)), _arch((1, 64, 96))]
    for _ in range(12):
        archs.append(_arch(*[(rng.randint(1, 6), rng.choice((16, 32, 64)), 8 * rng.randint(4, 64))
                             for _ in range(rng.randint(1, 6))]))
    for a in archs:
        assert llm_arch_distance(a, a) == 0.0
        assert llm_arch_distance(a, LlmArch.from_dict(a.to_dict())) == 0.0
        for b in archs:
            assert llm_arch_distance(a, b) == llm_arch_distance(b, a)  # exactly: costs are binary fractions
    assert llm_arch_distance(SEED, _arch((2, 32, 128))) == 1.0                          # one block deleted
    assert llm_arch_distance(SEED, _arch((2, 32, 256), (2, 32, 128))) == 1.0            # MLP doubled
    widened = llm_arch_distance(SEED, _arch((2, 32, 160), (2, 32, 128)))
    headed = llm_arch_distance(SEED, _arch((3, 32, 128), (2, 32, 128)))
    assert 0 < widened < 1 and 0 < headed < 1


# ---- the architecture search -------------------------------------------------------------------------

def _run(search: LlmArchitectureSearch, n: int, *, lag: int = 0) -> tuple[list[LlmProposal], set[str]]:
    """`n` proposals, each result observed up to a few proposals later: with lag > 0, `lag` trials are
    in flight and the oldest and a newer one finish by turns (results out of proposal order). Returns
    the proposals and the hashes still unobserved."""
    out: list[LlmProposal] = []
    pending: list[LlmProposal] = []
    for i in range(n):
        p = search.propose()
        assert p is not None
        out.append(p)
        pending.append(p)
        if len(pending) > lag:
            done = pending.pop(0 if i % 2 else len(pending) - 2)
            search.observe(done.arch_hash, _loss(done.arch))
    return out, {p.arch_hash for p in pending}


def _history(proposals: list[LlmProposal], observed: set[str]) -> list[dict]:
    return [{"arch": p.arch.to_dict(), "arch_hash": p.arch_hash, "parent_hash": p.parent_hash,
             "growths": [dict(g) for g in p.growths], "loss": _loss(p.arch) if p.arch_hash in observed else None}
            for p in proposals]


def test_search_proposes_the_seed_first_then_new_bounded_replayable_children():
    search = LlmArchitectureSearch(SEED, rng_seed=0, **BOUNDS)
    proposals, _ = _run(search, 30)
    first = proposals[0]
    assert (first.arch, first.arch_hash, first.parent_hash, first.growths) == (SEED, llm_arch_hash(SEED), None, ())
    hashes = [p.arch_hash for p in proposals]
    assert len(set(hashes)) == len(hashes)
    by_hash = {p.arch_hash: p for p in proposals}
    for p in proposals:
        assert p.arch_hash == llm_arch_hash(p.arch)
        assert search.allowed(p.arch)
        assert len(p.arch.layers) <= BOUNDS["max_layers"]
        assert all(x.mlp_hidden <= 320 and x.heads <= 4 and x.head_dim == 32 for x in p.arch.layers)
        assert train_flops_per_token(p.arch).train <= BOUNDS["max_train_flops_per_token"]
        if p.parent_hash is None:
            continue
        assert 1 <= len(p.growths) <= 2 and p.morphisms == tuple(g["kind"] for g in p.growths)
        assert replay(by_hash[p.parent_hash].arch, p.growths) == p.arch
        for g in p.growths:
            if g["kind"] == "widen_mlp":
                assert g["new_hidden"] % 8 == 0
            if g["kind"] == "add_heads":
                assert g["n"] in (1, 2)
    assert {k for p in proposals for k in p.morphisms} == {"insert_block", "widen_mlp", "add_heads"}
    best = search.best()
    assert best is not None and best[1] == min(_loss(p.arch) for p in proposals)


def test_search_is_deterministic_and_resumes_to_the_same_next_proposal():
    live = LlmArchitectureSearch(SEED, rng_seed=3, **BOUNDS)
    again = LlmArchitectureSearch(SEED, rng_seed=3, **BOUNDS)
    proposals, unobserved = _run(live, 13, lag=2)
    assert [p.arch_hash for p in _run(again, 13, lag=2)[0]] == [p.arch_hash for p in proposals]
    assert unobserved != {p.arch_hash for p in proposals[-2:]}  # an older trial is still out
    observed = {p.arch_hash for p in proposals} - unobserved
    resumed = LlmArchitectureSearch.from_history(SEED, _history(proposals, observed), rng_seed=3, **BOUNDS)
    for _ in range(3):
        a, b = live.propose(), resumed.propose()
        assert a is not None and b is not None
        assert (a.arch_hash, a.parent_hash, a.growths) == (b.arch_hash, b.parent_hash, b.growths)
        for s in (live, resumed):
            s.observe(a.arch_hash, _loss(a.arch))


def test_search_ends_when_the_bounds_leave_nothing_new():
    search = LlmArchitectureSearch(SEED, max_layers=2, max_mlp_hidden=128, max_heads_per_layer=2)
    assert search.propose() is not None
    assert search.propose() is None
    with pytest.raises(ValueError):
        LlmArchitectureSearch(SEED, max_layers=1)
    tight = LlmArchitectureSearch(SEED, max_layers=2, max_mlp_hidden=136, max_heads_per_layer=2)
    seen = [tight.propose() for _ in range(5)]  # each block's MLP may gain 8 units: 3 children in all
    assert [p is None for p in seen] == [False, False, False, False, True]


def test_search_observe_and_register_checks():
    search = LlmArchitectureSearch(SEED)
    seed = search.propose()
    assert seed is not None
    with pytest.raises(ValueError):
        search.observe(seed.arch_hash, float("nan"))
    with pytest.raises(KeyError):
        search.observe("0" * 64, 2.0)
    other = _arch((2, 32, 128), (2, 32, 128), (2, 32, 128))
    search.observe(llm_arch_hash(other), 2.0, arch=other)  # an outside result, registered on the way
    assert llm_arch_hash(other) in search.known_hashes
    with pytest.raises(ValueError):
        search.register(other, arch_hash=seed.arch_hash)  # a hash that is not the arch's


def test_searches_import_without_torch():
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "torch":
                    raise ImportError(f"blocked: {name}")
        sys.meta_path.insert(0, Block())
        import aiperf_runner.search.llmhparams, aiperf_runner.search.llmsearch
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")


# ---- the hyper-parameter search ----------------------------------------------------------------------

def test_hparam_sources_by_round_bounds_and_loss_minimised():
    pytest.importorskip("optuna")
    from aiperf_runner.search.llmhparams import DEFAULTS, KEYS, LlmHparamSearch

    h = LlmHparamSearch(seed=0, n_startup_trials=2)
    sources = {}
    for seq in range(16):
        tid = f"t{seq:04d}"
        parent = None if seq == 0 else f"t{(seq - 1) // 2:04d}"
        hp, src = h.suggest(tid, parent, seq // 2)
        sources[tid] = (seq // 2, src)
        assert set(hp) == set(KEYS) and h.space.contains(hp), hp
        assert 3e-4 <= hp["lr"] <= 1e-2 and 0 <= hp["warmup_steps"] <= 100 and 1e-3 <= hp["weight_decay"] <= 0.3
        assert hp["batch_tokens"] in (2048, 4096, 8192) and isinstance(hp["warmup_steps"], int)
        if src == "seed":
            assert hp == DEFAULTS
        if src == "inherited":
            assert hp == h.hparams(parent)
        assert h.tell(tid, 2.0 - 0.01 * seq)
    assert sources["t0000"] == (0, "seed")
    assert all(src == "inherited" for r, src in sources.values() if 0 < r < 3)
    assert {src for r, src in sources.values() if r in (3, 5, 7)} == {"tpe"}
    assert {src for r, src in sources.values() if r in (4, 6)} == {"inherited"}
    assert len(h.study.trials) == 16
    assert sorted(t.value for t in h.study.trials) == sorted(-(2.0 - 0.01 * s) for s in range(16))
    tid, _, loss = h.best()
    assert (tid, loss) == ("t0015", pytest.approx(1.85))
    assert not h.tell("t0000", 1.0) and not h.tell("nope", 1.0)


def test_hparam_batch_tokens_bounds_divergence_and_resume():
    pytest.importorskip("optuna")
    from aiperf_runner.search.llmhparams import LlmHparamSearch, LlmSpace

    h = LlmHparamSearch(seed=1, n_startup_trials=1, batch_tokens=(8192, 16384))
    assert h.defaults()["batch_tokens"] == 8192  # nearest to the default 4,096
    for seq in range(6):
        hp, src = h.suggest(f"t{seq}", None, 3)
        assert src == "tpe" and hp["batch_tokens"] in (8192, 16384)
        assert h.tell(f"t{seq}", float("inf") if seq == 2 else 2.5 - 0.1 * seq)
    assert h.best()[0] == "t5"
    with pytest.raises(ValueError):
        LlmSpace(batch_tokens=(3000, 4096))
    records = [{"trial": f"t{s}", "hparams": h.hparams(f"t{s}"), "loss": 2.0 - 0.1 * s, "hparam_source": "tpe"}
               for s in range(6)]
    resumed = LlmHparamSearch.from_history(records, seed=1, batch_tokens=(8192, 16384))
    assert resumed.best()[0] == "t5" and resumed.source("t3") == "tpe"
    hp, src = resumed.suggest("t6", "t5", 4)
    assert src == "inherited" and hp == h.hparams("t5")
