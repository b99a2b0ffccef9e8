"""Gaussian-process regression over architectures known only by their pairwise edit distances.

Used by the architecture search (bayesian.py) for the mean and uncertainty of a candidate's
accuracy; the linear algebra uses scipy's triangular routines when scipy is installed.
"""

from __future__ import annotations

import math

import numpy as np

try:  # scipy (in the train extra) is several times faster here than numpy's general solvers
    from scipy.linalg import LinAlgError as _ScipyLinAlgError
    from scipy.linalg import cholesky as _scipy_cholesky
    from scipy.linalg import solve_triangular as _solve_triangular
except ImportError:  # pragma: no cover - exercised only without scipy
    _scipy_cholesky = None


def _cholesky(k: np.ndarray) -> np.ndarray:
    if _scipy_cholesky is None:  # pragma: no cover
        return np.linalg.cholesky(k)
    try:
        return _scipy_cholesky(k, lower=True, check_finite=False)
    except _ScipyLinAlgError as exc:
        raise np.linalg.LinAlgError(str(exc)) from exc


def _solve_lower(chol: np.ndarray, b: np.ndarray, transpose: bool = False) -> np.ndarray:
    """chol^-1 b (or chol^-T b)."""
    if _scipy_cholesky is None:  # pragma: no cover
        return np.linalg.solve(chol.T if transpose else chol, b)
    return _solve_triangular(chol, b, lower=True, trans=1 if transpose else 0, check_finite=False)


class GaussianProcess:
    """GP regression over architectures given only their pairwise edit distances.

    An edit distance is not Euclidean, and exp(-d^2) of it is far from positive definite (at 1,000
    random morphism chains of the small seed its kernel matrix has hundreds of negative eigenvalues).
    As NNI does for training, the distances are first embedded with Bourgain's random-subset
    embedding (coordinate = distance to the nearest member of a random subset; O(log^2 n)
    coordinates); unlike NNI, candidates are embedded the same way at prediction time, so training
    and prediction use one kernel: k = exp(-(|e_a - e_b| / sqrt(K) / l)^2), positive semi-definite
    by construction. l: the median embedded distance (or fixed). Targets are standardised; noise
    variance `noise / count` sits on the diagonal (count = observations of that architecture)."""

    def __init__(self, noise: float = 1e-2, length_scale: float | None = None) -> None:
        self.noise = noise
        self.fixed_length_scale = length_scale
        self.length_scale = 1.0
        self.n = 0
        self.jitter = 0.0
        self._sets_n = 0      # number of points the current random subsets were drawn from
        self._emb = np.zeros((0, 0))

    def _draw_subsets(self, n: int) -> None:
        rng = np.random.default_rng(n)
        if n <= 2:
            sets = [np.array([i]) for i in range(n)]
        else:
            levels = max(1, math.ceil(math.log2(n)) - 1)
            repeats = max(1, math.ceil(math.log(n)))
            sets = [rng.choice(n, 2 ** i, replace=True) for i in range(levels + 1) for _ in range(repeats)]
        # A coordinate is a minimum over its subset: members drawn twice count once, in index order.
        self._sets = [np.unique(x) for x in sets]
        self._flat = np.concatenate(self._sets)
        self._starts = np.cumsum([0] + [len(x) for x in self._sets[:-1]])
        self._sets_n = n

    def _embed(self, dist: np.ndarray) -> np.ndarray:
        """Coordinates of points given their (m, n) distances to the training points (few points)."""
        return np.minimum.reduceat(dist[:, self._flat], self._starts, axis=1).astype(np.float64)

    def _embed_training(self, dist: np.ndarray, first: int = 0) -> np.ndarray:
        """Coordinates of training points `first`.. from the symmetric (n, n) training distances:
        each subset's rows are gathered (contiguous) and reduced, 10-15x faster at 1,000 points
        than gathering the columns of every subset at once (`_embed`), with the same values."""
        out = np.empty((len(self._sets), dist.shape[0] - first), dtype=np.float32)
        for k, members in enumerate(self._sets):
            np.min(dist[members, first:], axis=0, out=out[k])
        return out.T.astype(np.float64)

    def _sq_dist(self, ea: np.ndarray, eb: np.ndarray, eb_norms: np.ndarray | None = None) -> np.ndarray:
        if eb_norms is None:
            eb_norms = np.einsum("ij,ij->i", eb, eb)
        sq = (np.einsum("ij,ij->i", ea, ea)[:, None] + eb_norms[None, :] - 2.0 * ea @ eb.T) / ea.shape[1]
        return np.clip(sq, 0.0, None)

    def fit(self, dist: np.ndarray, y: np.ndarray, counts: np.ndarray | None = None,
            incremental: bool = False) -> None:
        """Fit on the (n, n) distance matrix of the training points (symmetric) and their targets.

        incremental=True: the points of the previous fit are the first rows of `dist`, in the same
        order (the search only appends). The random subsets of the embedding are then kept until
        the number of points has grown by a quarter, and only the new points are embedded."""
        n = len(y)
        if n == 0:
            self.n = 0
            return
        dist = np.asarray(dist, dtype=np.float32)
        old = self._emb.shape[0] if incremental and n >= self.n else 0
        if old == 0 or self._sets_n < 16 or n > 1.25 * self._sets_n:
            self._draw_subsets(n)
            self._emb = self._embed_training(dist)
        elif n > old:
            self._emb = np.concatenate([self._emb[:old], self._embed_training(dist, old)])
        else:
            self._emb = self._emb[:n]
        self.n = n
        self._emb_norms = np.einsum("ij,ij->i", self._emb, self._emb)
        sq = self._sq_dist(self._emb, self._emb, self._emb_norms)
        if self.fixed_length_scale:
            self.length_scale = float(self.fixed_length_scale)
        else:
            if n <= 300:
                upper = sq[np.triu_indices(n, 1)]
            else:  # the median of 40,000 random pairs
                rng = np.random.default_rng(n)
                i = rng.integers(0, n, 40_000)
                j = rng.integers(0, n, 40_000)
                upper = sq[i[i != j], j[i != j]]
            upper = upper[upper > 0]
            self.length_scale = max(1e-3, float(np.sqrt(np.median(upper)))) if upper.size else 1.0
        y = np.asarray(y, dtype=np.float64)
        self.y_mean = float(y.mean())
        self.y_std = max(float(y.std()), 1e-3)
        z = (y - self.y_mean) / self.y_std
        counts = np.ones(n) if counts is None else np.asarray(counts, dtype=np.float64)
        k = np.exp(-sq / self.length_scale ** 2)
        k[np.diag_indices(n)] = 1.0 + self.noise / counts
        jitter = 0.0
        for _attempt in range(12):
            try:
                chol = _cholesky(k if jitter == 0 else k + jitter * np.eye(n))
                break
            except np.linalg.LinAlgError:
                jitter = 1e-8 if jitter == 0 else jitter * 10
        else:  # pragma: no cover - positive semi-definite plus noise: never reached
            w, v = np.linalg.eigh(k)
            chol = _cholesky((v * np.maximum(w, 1e-6)) @ v.T)
        self.jitter = jitter
        self._chol = chol
        self._alpha = _solve_lower(chol, _solve_lower(chol, z), transpose=True)

    def predict(self, dist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation (in target units) at points with the given distances (m, n)
        to the training architectures."""
        m = dist.shape[0]
        if self.n == 0:
            return np.zeros(m), np.ones(m)
        emb = self._embed(np.asarray(dist, dtype=np.float32))
        k = np.exp(-self._sq_dist(emb, self._emb, self._emb_norms) / self.length_scale ** 2)
        mean = k @ self._alpha
        v = _solve_lower(self._chol, k.T)
        var = np.clip(1.0 - np.einsum("ij,ij->j", v, v), 1e-12, None)
        return self.y_mean + self.y_std * mean, self.y_std * np.sqrt(var)
