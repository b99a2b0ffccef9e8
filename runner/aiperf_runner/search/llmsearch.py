"""Architecture search of AIPerf-LLM: GP-UCB + bounded simulated annealing over decoder-only transformer
shapes, proposing children 1-2 function-preserving growths (train/llm/morph.py) from an observed one.

- **Growths** are plain dicts, one per morph.py function, so that the trial program can replay them on
  the parent's weights: {"kind": "insert_block", "index": i, "layer": {heads, head_dim, mlp_hidden}},
  {"kind": "widen_mlp", "layer": i, "new_hidden": h}, {"kind": "add_heads", "layer": i, "n": n}.
  `apply_growth` is their effect on the architecture alone (no torch here). Sizes: an MLP grows by
  x1.25-x2 in steps of 8 units, 1-2 heads are added at a time, an inserted block copies the shape of a
  neighbour.
- **Distance**: an edit distance over the blocks (insert/delete 1; substitute: the larger of
  |log2| ratios of attention width heads*head_dim and of mlp_hidden, each capped at 1 — the conv rule of
  editdistance.py, so that doubling a block's width is as far as inserting one). Costs are rounded to
  multiples of 1/1024: every sum is then exact in float32, and d(a, b) == d(b, a) to the bit whichever
  side was computed first.
- **Model and acquisition**: gp.py's GaussianProcess on -loss (the search *minimises* validation loss,
  in nats), UCB mean + 2.576 x std, fitted on the observed architectures in proposal order.
- **Optimiser**: the annealing bayesian.py uses too (search/annealing.py, with its inbox and locks),
  bounded (`max_expansions`, `max_pops`, at most `max_chain` growths from an observed root); random
  chains from the observed architectures when it finds none.

Determinism: a proposal depends only on the architectures proposed or registered so far and the results
observed, not on the order results came in: the random stream of each `propose` is seeded from
`rng_seed` and the number of known architectures, GP rows are in proposal order and the model is refitted
from scratch. `from_history` therefore makes exactly the proposal the live search would have made next.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aiperf_runner.search.annealing import AnnealingSearch
from aiperf_runner.search.blas import blas_single_thread
from aiperf_runner.search.editdistance import Vocabulary, _dp
from aiperf_runner.search.gp import GaussianProcess
from aiperf_runner.spec.llmflops import LlmArch, LlmLayer, train_flops_per_token
from aiperf_runner.spec.llmgrowth import GROWTH_KINDS, apply_growth, llm_arch_hash, replay

BETA = 2.576
WIDEN_FACTORS = (1.25, 1.5, 1.75, 2.0)
MLP_STEP = 8
_COST_QUANTUM = 1024.0
_UNBOUNDED = 1 << 62

Growth = dict[str, Any]
LayerToken = tuple[int, int]  # (heads * head_dim, mlp_hidden): what the distance sees of a block


@dataclass(frozen=True)
class LlmProposal:
    """One architecture to train: `growths` replayed in order on the parent's weights give its model."""

    arch: LlmArch
    arch_hash: str
    parent_hash: str | None
    growths: tuple[Growth, ...] = ()
    acquisition: float | None = None

    @property
    def morphisms(self) -> tuple[str, ...]:
        return tuple(str(g["kind"]) for g in self.growths)


# ---- growths --------------------------------------------------------------------------------------

def _canonical_growth(growth: Mapping[str, Any]) -> Growth:
    """A growth as a fresh dict of plain values (a logged one may come with lists or JSON numbers)."""
    return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in growth.items()}


# ---- distance -------------------------------------------------------------------------------------

def _tokens(arch: LlmArch) -> tuple[LayerToken, ...]:
    return tuple((x.attn_dim, x.mlp_hidden) for x in arch.layers)


def _layer_features(tok: tuple[int, ...]) -> tuple[float, ...]:
    return tuple(math.log2(v) for v in tok)


def _layer_cost(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Substitution costs between blocks given as log2 features (attention width, MLP width): the larger
    octave difference, capped at 1; |x - y| keeps it exactly symmetric, the rounding keeps sums exact."""
    octaves = np.minimum(1.0, np.abs(a[:, None, :] - b[None, :, :])).max(axis=2)
    return np.round(octaves * _COST_QUANTUM) / _COST_QUANTUM


class _LayerBank:
    """The block sequences of reference architectures, padded into one array, growable; distances from
    many candidates to all of them in one vectorised dynamic programme (editdistance._dp)."""

    def __init__(self) -> None:
        self.vocab = Vocabulary(_layer_cost, _layer_features)
        self.n = 0
        self._seqs = np.zeros((16, 8), dtype=np.int32)
        self._lens = np.zeros(16, dtype=np.int64)
        self._max = 0

    def _encode(self, seqs: Sequence[Sequence[LayerToken]]) -> tuple[np.ndarray, np.ndarray]:
        ids = [self.vocab.encode(list(s)) for s in seqs]
        lengths = np.array([len(x) for x in ids], dtype=np.int64)
        out = np.zeros((len(ids), max(1, int(lengths.max(initial=0)))), dtype=np.int32)
        for k, x in enumerate(ids):
            out[k, :len(x)] = x
        return out, lengths

    def add(self, seq: Sequence[LayerToken]) -> None:
        enc, length = self._encode([seq])
        if self.n == len(self._lens):
            self._seqs = np.concatenate([self._seqs, np.zeros_like(self._seqs)])
            self._lens = np.concatenate([self._lens, np.zeros_like(self._lens)])
        if length[0] > self._seqs.shape[1]:
            wider = np.zeros((len(self._seqs), max(int(length[0]), 2 * self._seqs.shape[1])), dtype=np.int32)
            wider[:, :self._seqs.shape[1]] = self._seqs
            self._seqs = wider
        self._seqs[self.n, :length[0]] = enc[0, :length[0]]
        self._lens[self.n] = length[0]
        self._max = max(self._max, int(length[0]))
        self.n += 1

    def distances(self, seqs: Sequence[Sequence[LayerToken]]) -> np.ndarray:
        """(len(seqs), n) edit distances from each block sequence to every reference."""
        m, n = len(seqs), self.n
        if m == 0 or n == 0:
            return np.zeros((m, n), dtype=np.float32)
        enc, lengths = self._encode(seqs)
        cost = self.vocab.cost
        lb = self._max
        bank = self._seqs[:n, :lb].T  # (Lb, n)
        used, inverse = np.unique(enc, return_inverse=True)
        inverse = inverse.reshape(enc.shape)
        table = np.ascontiguousarray(cost[used][:, bank].transpose(1, 0, 2))  # (Lb, used, n)

        def cost_row(i: int) -> np.ndarray:
            return np.take(table, inverse[:, i], axis=1).reshape(lb, m * n)

        return _dp(lb, int(lengths.max()), lengths, self._lens[:n], (m, n), cost_row)


def llm_arch_distance(a: LlmArch, b: LlmArch) -> float:
    """Edit distance between two architectures' block sequences (see the module docstring)."""
    bank = _LayerBank()
    bank.add(_tokens(b))
    return float(bank.distances([_tokens(a)])[0, 0])


# ---- the search -----------------------------------------------------------------------------------

@dataclass
class _Known:
    arch: LlmArch
    parent_hash: str | None
    growths: tuple[Growth, ...]
    index: int  # proposal order


class LlmArchitectureSearch(AnnealingSearch[LlmArch, Growth, LlmProposal]):
    """Proposes LLM architectures: the seed first, then children of observed ones by GP-UCB + annealing.

    Bounds (None: unbounded): `max_layers` blocks, `max_train_flops_per_token` (spec.llmflops
    `train_flops_per_token(arch).train`), `max_mlp_hidden` and `max_heads_per_layer` for every block.
    The seed must lie within them."""

    def __init__(self, seed_arch: LlmArch, rng_seed: int = 0, max_layers: int | None = None,
                 max_train_flops_per_token: int | None = None, max_mlp_hidden: int | None = None,
                 max_heads_per_layer: int | None = None, beta: float = BETA, n_neighbours: int = 8,
                 max_expansions: int = 12, max_pops: int = 48, max_chain: int = 2, t_min: float = 1e-4,
                 anneal: float = 0.9, noise: float = 1e-2, length_scale: float | None = None) -> None:
        seed_arch.validate()
        self.seed_arch = seed_arch
        self.seed_hash = llm_arch_hash(seed_arch)
        self.rng_seed = rng_seed
        self.max_layers = max_layers
        self.max_train_flops_per_token = max_train_flops_per_token
        self.max_mlp_hidden = max_mlp_hidden
        self.max_heads_per_layer = max_heads_per_layer
        if not self.allowed(seed_arch):
            raise ValueError("the seed architecture lies outside the search's bounds")
        self.beta = beta
        self.n_neighbours = n_neighbours
        self.max_expansions = max_expansions
        self.max_pops = max_pops
        self.max_chain = max(1, max_chain)
        self.t_min = t_min
        self.anneal = anneal
        self.gp = GaussianProcess(noise=noise, length_scale=length_scale)
        self._init_feeding()
        self._archs: dict[str, _Known] = {}      # every proposed or registered architecture
        self._obs: dict[str, list[float]] = {}   # arch hash -> losses observed
        self._obs_rows: list[str] = []           # observed hashes in observation order (bank and _dist rows)
        self._bank = _LayerBank()
        self._dist = np.zeros((0, 0), dtype=np.float32)
        self._fit_rows: list[int] = []           # the GP's rows: indices into _obs_rows, in proposal order
        self._fitted_at = -1
        self._n_obs_total = 0
        self._rng = random.Random(rng_seed)

    # ---- bounds ---------------------------------------------------------------------------------
    def allowed(self, arch: LlmArch) -> bool:
        """Whether `arch` lies within every bound."""
        if self.max_layers is not None and len(arch.layers) > self.max_layers:
            return False
        if self.max_mlp_hidden is not None and any(x.mlp_hidden > self.max_mlp_hidden for x in arch.layers):
            return False
        if self.max_heads_per_layer is not None and any(x.heads > self.max_heads_per_layer for x in arch.layers):
            return False
        if self.max_train_flops_per_token is not None:
            return train_flops_per_token(arch).train <= self.max_train_flops_per_token
        return True

    # ---- feeding --------------------------------------------------------------------------------
    def register(self, arch: LlmArch, parent_hash: str | None = None, growths: Iterable[Mapping[str, Any]] = (),
                 arch_hash: str | None = None) -> str:
        """Record an architecture proposed earlier (resume) so that it is never proposed again."""
        h = llm_arch_hash(arch)
        if arch_hash is not None and arch_hash != h:
            raise ValueError(f"arch_hash {arch_hash[:12]} is not the hash of its architecture ({h[:12]})")
        ops = tuple(_canonical_growth(g) for g in growths)
        self._enqueue_register(h, (h, arch, parent_hash, ops))
        return h

    def observe(self, arch_hash: str, loss: float, arch: LlmArch | None = None) -> None:
        """The validation loss (nats) a trial of `arch_hash` reached; repeats are averaged, not separate
        points. An architecture never registered needs `arch`."""
        self._enqueue_result(arch_hash, loss, arch, result_name="loss", arch_name="arch")

    @classmethod
    def from_history(cls, seed_arch: LlmArch, history: Iterable[Mapping[str, Any]],
                     **kwargs: Any) -> LlmArchitectureSearch:
        """A search that has seen the run so far: records in proposal order, each with "arch" (dict or
        LlmArch), "arch_hash", "parent_hash", "growths" and "loss" (None unless finished); kwargs as for
        the constructor."""
        search = cls(seed_arch, **kwargs)
        search._replay(history, _as_arch, arch_key="arch", steps_key="growths", result_key="loss")
        return search

    def _drain(self) -> None:
        items = self._take_inbox()
        new_rows: list[int] = []
        for kind, payload in items:
            if kind == "register":
                h, arch, parent, ops = payload
                if h not in self._archs:
                    self._archs[h] = _Known(arch, parent, ops, len(self._order))
                    self._order.append(h)
            else:
                h, loss = payload
                self._n_obs_total += 1
                if h not in self._obs:
                    self._obs[h] = []
                    new_rows.append(len(self._obs_rows))
                    self._obs_rows.append(h)
                    self._bank.add(_tokens(self._archs[h].arch))
                self._obs[h].append(loss)
        if new_rows:
            self._fill_distances(new_rows)

    def _fill_distances(self, rows: list[int]) -> None:
        n = len(self._obs_rows)
        grown = np.zeros((n, n), dtype=np.float32)
        old = len(self._dist)
        grown[:old, :old] = self._dist
        block = self._bank.distances([_tokens(self._archs[self._obs_rows[i]].arch) for i in rows])
        index = np.array(rows)
        grown[index, :] = block
        grown[:, index] = block.T
        self._dist = grown

    def _mean_loss(self, h: str) -> float:
        # fsum: the same value whatever order the results came in
        return math.fsum(self._obs[h]) / len(self._obs[h])

    # ---- model ----------------------------------------------------------------------------------
    def _refit(self) -> None:
        if self._fitted_at == self._n_obs_total:
            return
        self._fit_rows = sorted(range(len(self._obs_rows)), key=lambda r: self._archs[self._obs_rows[r]].index)
        if self._fit_rows:
            idx = np.array(self._fit_rows)
            y = np.array([-self._mean_loss(self._obs_rows[r]) for r in self._fit_rows])
            counts = np.array([len(self._obs[self._obs_rows[r]]) for r in self._fit_rows], dtype=np.float64)
            self.gp.fit(self._dist[np.ix_(idx, idx)], y, counts, incremental=False)
        self._fitted_at = self._n_obs_total

    def _predict(self, archs: Sequence[LlmArch]) -> tuple[np.ndarray, np.ndarray]:
        """GP mean and std of -loss."""
        if not archs or not self._fit_rows:
            return np.zeros(len(archs)), np.ones(len(archs))
        dist = self._bank.distances([_tokens(a) for a in archs])[:, self._fit_rows]
        return self.gp.predict(dist)

    def _acquisition(self, archs: Sequence[LlmArch]) -> np.ndarray:
        mean, std = self._predict(archs)
        return mean + self.beta * std

    def predict(self, archs: Sequence[LlmArch]) -> tuple[np.ndarray, np.ndarray]:
        """GP mean and standard deviation of the validation loss of each architecture (diagnostics)."""
        with self._search_lock, blas_single_thread():
            self._drain()
            self._refit()
            mean, std = self._predict(archs)
            return -mean, std

    def best(self) -> tuple[str, float] | None:
        """(hash, mean loss) of the architecture with the lowest mean loss observed; None before any."""
        with self._search_lock:
            self._drain()
            if not self._obs:
                return None
            h = min(self._obs_rows, key=lambda k: (self._mean_loss(k), self._archs[k].index))
            return h, self._mean_loss(h)

    # ---- proposing ------------------------------------------------------------------------------
    def propose(self) -> LlmProposal | None:
        """The next architecture to train, never one proposed or registered before; None when none is
        left within the bounds (nothing 1-`max_chain` growths from an observed architecture)."""
        with self._search_lock, blas_single_thread():
            self._drain()
            if self.seed_hash not in self._archs:
                return self._accept(self.seed_hash, self.seed_arch, None, (), None)
            # Seeded from the state, not carried over: from_history then continues the same stream.
            self._rng = random.Random(f"{self.rng_seed}:{len(self._order)}")
            self._refit()
            found = self._anneal(1) or self._random_fallback(1)
            return found[0] if found else None

    def _accept(self, h: str, arch: LlmArch, parent: str | None, growths: tuple[Growth, ...],
                acq: float | None) -> LlmProposal:
        self._archs[h] = _Known(arch, parent, growths, self._claim(h))
        return LlmProposal(arch, h, parent, tuple(_canonical_growth(g) for g in growths), acq)

    # the annealing's view of an architecture (search/annealing.py)
    def _allowed(self, arch: LlmArch) -> bool:
        return self.allowed(arch)

    def _neighbour(self, arch: LlmArch) -> tuple[LlmArch, Growth] | None:
        """A random growth of `arch` and its result; None when no growth keeps the per-block bounds
        (it draws nothing from the random stream then, and none ever will from `arch`)."""
        growth = self.random_growth(arch, self._rng)
        return None if growth is None else (apply_growth(arch, growth), growth)

    def _hash(self, arch: LlmArch) -> str:
        return llm_arch_hash(arch)

    def _arch_of(self, arch_hash: str) -> LlmArch:
        return self._archs[arch_hash].arch

    def _acquisition_of(self, archs: Sequence[LlmArch]) -> np.ndarray:
        return self._acquisition(archs)

    def _fallback_pool(self) -> list[str]:
        return [h for h, _ in self._roots()]

    def _chain_length(self, attempt: int) -> int:
        return 1 + attempt % self.max_chain

    def _roots(self) -> list[tuple[str, float]]:
        """(hash, value) of the architectures children grow from, in proposal order: the observed ones by
        -mean loss, or every known one (value 0) before the first result."""
        if self._obs:
            hashes = sorted(self._obs, key=lambda k: self._archs[k].index)
            return [(h, -self._mean_loss(h)) for h in hashes]
        return [(h, 0.0) for h in self._order]

    def random_growth(self, arch: LlmArch, rng: random.Random) -> Growth | None:
        """One random growth of `arch` that keeps the per-block bounds and the number of blocks (the FLOP
        bound is the caller's: it depends on the whole architecture); None when no growth does."""
        layers = arch.layers
        options: list[str] = []
        if self.max_layers is None or len(layers) < self.max_layers:
            options.append("insert_block")
        widenable = [i for i, x in enumerate(layers) if self._room_mlp(x) >= MLP_STEP]
        if widenable:
            options.append("widen_mlp")
        headable = [i for i, x in enumerate(layers) if self._room_heads(x) >= 1]
        if headable:
            options.append("add_heads")
        if not options:
            return None
        kind = rng.choice(options)
        if kind == "insert_block":
            index = rng.randint(0, len(layers))
            neighbours = [layers[j] for j in (index - 1, index) if 0 <= j < len(layers)]
            return {"kind": kind, "index": index, "layer": rng.choice(neighbours).to_dict()}
        if kind == "widen_mlp":
            i = rng.choice(widenable)
            old = layers[i].mlp_hidden
            step = MLP_STEP * max(1, round(old * (rng.choice(WIDEN_FACTORS) - 1) / MLP_STEP))
            step = min(step, self._room_mlp(layers[i]) // MLP_STEP * MLP_STEP)
            return {"kind": kind, "layer": i, "new_hidden": old + step}
        i = rng.choice(headable)
        return {"kind": kind, "layer": i, "n": min(rng.choice((1, 2)), self._room_heads(layers[i]))}

    def _room_mlp(self, layer: LlmLayer) -> int:
        """Units block `layer`'s MLP may still grow by."""
        return _UNBOUNDED if self.max_mlp_hidden is None else self.max_mlp_hidden - layer.mlp_hidden

    def _room_heads(self, layer: LlmLayer) -> int:
        return _UNBOUNDED if self.max_heads_per_layer is None else self.max_heads_per_layer - layer.heads


def _as_arch(arch: LlmArch | Mapping[str, Any]) -> LlmArch:
    """A history record's architecture: an LlmArch, or its dict."""
    return arch if isinstance(arch, LlmArch) else LlmArch.from_dict(arch)


__all__ = ["BETA", "GROWTH_KINDS", "Growth", "LlmArchitectureSearch", "LlmProposal", "apply_growth",
           "llm_arch_distance", "llm_arch_hash", "replay"]
