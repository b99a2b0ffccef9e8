"""AIPerf-LLM's text: `llm-smoke`, a seeded synthetic byte text of known entropy, and plain-text corpora.

**llm-smoke** is a Markov source of order `order` (default 2) over a 32-symbol alphabet written as printable
bytes (`ALPHABET`). Its transition table gives every context (the last `order` symbols) a distribution over
the next symbol in integer weights summing to `TOTAL` (1024): 1 for every symbol (so every context can
follow every other: the chain is irreducible and aperiodic, its stationary distribution unique), the rest
shared among 1 to 4 favoured symbols. The table and the text are drawn from a counter-based SplitMix64 in
numpy uint64 arithmetic (shifts, xors, wrapping multiplies; no floating point, no library sampler whose
stream could change between numpy versions), so the same seed gives the same bytes on every platform.

Because the source is known, so is its **entropy rate** H = sum_c pi(c) H(P(.|c)) (pi: the stationary
distribution of the contexts): no model can predict the text better than H nats per byte on average, so
a validation-loss gate can be set from it rather than from reference runs alone. pi and H are computed in
float64 with numpy (a power iteration of fixed form): identical everywhere up to float rounding (~1e-15).
`window_floor_nats(seq_len)` is the floor of the frozen evaluation (train/llm/trainer.py), which scores
non-overlapping windows: a window's first `order` bytes have less context, so its floor is slightly above H.

**Corpora** (`read_corpus`): a plain text file as bytes, its last `VAL_FRACTION` the validation part, both
bound by SHA-256.

**The King James Bible** (`kjv_text`, preset `llm-kjv`): Debian's `bible-kjv-text` ships the text in the
`bible` tool's compressed format (`/usr/lib/bible.data`), not as plain text, so it is extracted by that
package's own reader, `bible` (package `bible-kjv`): `bible -f -p /usr/lib Gen1:1-Rev22:21`, the whole
text with pretty-printing off — one verse a line, each preceded by its reference (`Ge1:1 In the
beginning God created the heaven and the earth.`), no line breaks inside a verse, ASCII only: 31,102
lines, 4,404,412 bytes, SHA-256 `KJV_SHA256`. `-p` names the data file's folder, so a `bible.data` in the
working directory is not read instead; COLUMNS is removed from the environment (it sets the width of
`-l`, unused here). Nothing is downloaded: without the packages, TextError says which to install. The
extraction takes about 0.3 s; `kjv_text` keeps the result in the cache (`data.idx.cache_root()`, keyed
by the digest, checked on every read), so the trials of a run read a file instead.

Torch-free: data/ sits below train/ (pyproject.toml's import contract).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ALPHABET = b"abcdefghijklmnopqrstuvwxyz .,;!\n"
"""The 32 symbols, as the bytes the text is written in."""
TOTAL = 1024
"""Each context's weights sum to this; every symbol has weight >= 1."""
MAX_FAVOURED = 4
DEFAULT_ORDER = 2
DEFAULT_SEED = 0
SMOKE_TRAIN_BYTES = 1 << 20
SMOKE_VAL_BYTES = 100_000
VAL_FRACTION = 0.05
SPLITS = {"table": 0, "train": 1, "val": 2, "probe": 3}
"""Independent streams of one seed: the transition table, and one per split."""
BURN_IN = 64

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


class TextError(ValueError):
    """A text that cannot be used (unknown split, too short a corpus, a corpus's package not installed)."""


# ---- integer random numbers -----------------------------------------------------------------------

def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 arrays (multiplies wrap modulo 2^64, as numpy's uint64 do)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def random_u64(seed: int, stream: int, start: int, n: int) -> np.ndarray:
    """Draws start..start+n-1 of stream `stream` of `seed`: a counter-based generator, any slice directly."""
    key = _mix(np.array([(seed * 0x10001 + stream) & (2**64 - 1)], dtype=np.uint64))[0]
    counter = np.arange(start, start + n, dtype=np.uint64) + np.uint64(1)
    return _mix(key + counter * _GOLDEN)


# ---- the source -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class MarkovSource:
    """A Markov source of order `order` over ALPHABET. `weights[c, s]`: integer weight of symbol s after
    context c (c = the last `order` symbols in base 32, the oldest most significant); rows sum to TOTAL."""

    seed: int
    order: int
    weights: np.ndarray  # (32**order, 32) int64

    @property
    def contexts(self) -> int:
        return len(ALPHABET) ** self.order

    @functools.cached_property
    def stationary(self) -> np.ndarray:
        """pi over contexts (float64): a power iteration until it changes by less than 1e-16."""
        k, p = len(ALPHABET), self.weights / TOTAL
        pi = np.full(self.contexts, 1.0 / self.contexts)
        for _ in range(100_000):
            # flow into context (suffix of c, s) from every c, summed over c's oldest symbol
            new = (pi[:, None] * p).reshape(k, self.contexts // k, k).sum(axis=0).reshape(-1)
            done = np.abs(new - pi).max() < 1e-16
            pi = new
            if done:
                break
        return pi / pi.sum()

    def entropy_rate_nats(self) -> float:
        """H = sum_c pi(c) H(P(.|c)), nats per byte: the floor of any model's expected loss."""
        p = self.weights / TOTAL
        per_context = -(p * np.log(p)).sum(axis=1)
        return float(self.stationary @ per_context)

    def block_entropy_nats(self, j: int) -> float:
        """Entropy of j consecutive symbols under the stationary distribution (j <= order + 1)."""
        if j == 0:
            return 0.0
        if j <= self.order:  # a marginal of pi: sum out the order - j oldest symbols
            marginal = self.stationary.reshape(-1, len(ALPHABET) ** j).sum(axis=0)
        elif j == self.order + 1:
            marginal = (self.stationary[:, None] * self.weights / TOTAL).reshape(-1)
        else:
            raise ValueError(f"block entropies are computed up to order + 1 = {self.order + 1}, not {j}")
        nz = marginal[marginal > 0]
        return float(-(nz * np.log(nz)).sum())

    def unigram_entropy_nats(self) -> float:
        """Entropy of one byte alone: the loss of the best model that ignores context."""
        return self.block_entropy_nats(1)

    def window_floor_nats(self, seq_len: int) -> float:
        """The floor of the frozen evaluation's loss on full windows of `seq_len` targets: position j of a
        window sees only j earlier bytes, H(X_j | X_<j) = block(j+1) - block(j), which is H from j = order."""
        per_position = [self.block_entropy_nats(min(j, self.order) + 1) - self.block_entropy_nats(min(j, self.order))
                        for j in range(seq_len)]
        return sum(per_position) / seq_len

    def generate(self, n_bytes: int, split: str) -> bytes:
        return generate(n_bytes, self.seed, split, order=self.order)


def _context_weights(draws: np.ndarray) -> np.ndarray:
    """One context's weights from its draws: 1 each, the rest shared among 1..MAX_FAVOURED favoured symbols."""
    k = len(ALPHABET)
    favoured_count = 1 + int(draws[0] % np.uint64(MAX_FAVOURED))
    favoured = np.argsort(draws[1:k + 1], kind="stable")[:favoured_count]  # distinct symbols
    shares = 1 + (draws[k + 1:k + 1 + favoured_count] % np.uint64(64)).astype(np.int64)
    rest = TOTAL - k
    alloc = rest * shares // shares.sum()
    alloc[0] += rest - alloc.sum()  # integer division's remainder to the first favoured symbol
    w = np.ones(k, dtype=np.int64)
    w[favoured] += alloc
    return w


@functools.lru_cache(maxsize=8)
def markov_source(seed: int = DEFAULT_SEED, order: int = DEFAULT_ORDER) -> MarkovSource:
    """The source of `seed`: its transition table from the seed's `table` stream."""
    if order < 1:
        raise TextError(f"order must be at least 1, got {order}")
    k = len(ALPHABET)
    contexts = k ** order
    per = 1 + k + MAX_FAVOURED  # draws per context
    draws = random_u64(seed, SPLITS["table"], 0, contexts * per).reshape(contexts, per)
    weights = np.stack([_context_weights(d) for d in draws])
    assert (weights.sum(axis=1) == TOTAL).all() and weights.min() >= 1
    weights.setflags(write=False)
    return MarkovSource(seed, order, weights)


def _cumulative_table(weights: np.ndarray) -> bytes:
    """For each context, TOTAL entries: entry u is the symbol that a draw u (0..TOTAL-1) picks."""
    rows = [np.repeat(np.arange(len(ALPHABET), dtype=np.uint8), w) for w in weights]
    return np.concatenate(rows).tobytes()


@functools.lru_cache(maxsize=8)
def _lookup(seed: int, order: int) -> bytes:
    return _cumulative_table(markov_source(seed, order).weights)


def generate(n_bytes: int, seed: int = DEFAULT_SEED, split: str = "train", *, order: int = DEFAULT_ORDER) -> bytes:
    """`n_bytes` of the source's text for `split` (train, val, probe: independent streams of one source).

    The chain starts at a context drawn from the split's stream and runs BURN_IN symbols before the first
    one kept, so the text starts close to the stationary distribution. Same arguments, same bytes.
    """
    if split not in SPLITS or split == "table":
        raise TextError(f"unknown split {split!r} (expected train, val or probe)")
    if n_bytes < 0:
        raise TextError(f"n_bytes must be >= 0, got {n_bytes}")
    k, contexts = len(ALPHABET), len(ALPHABET) ** order
    table = _lookup(seed, order)
    draws = (random_u64(seed, SPLITS[split], 0, BURN_IN + n_bytes + 1) >> np.uint64(54)).tolist()  # 10 bits
    ctx = draws[0] % contexts
    out = bytearray(BURN_IN + n_bytes)
    for i in range(BURN_IN + n_bytes):  # sequential: each symbol's context is the symbols before it
        s = table[ctx * TOTAL + draws[i + 1]]
        out[i] = s
        ctx = (ctx * k + s) % contexts
    return bytes(out[BURN_IN:]).translate(_TO_ALPHABET)


_TO_ALPHABET = bytes(ALPHABET[i] if i < len(ALPHABET) else 0 for i in range(256))
_FROM_ALPHABET = bytes(ALPHABET.index(i) if i in ALPHABET else 0 for i in range(256))


def to_symbols(text: bytes) -> np.ndarray:
    """The symbol indices (0..31, uint8) of llm-smoke bytes."""
    return np.frombuffer(text.translate(_FROM_ALPHABET), dtype=np.uint8)


def entropy_rate_nats(seed: int = DEFAULT_SEED, order: int = DEFAULT_ORDER) -> float:
    return markov_source(seed, order).entropy_rate_nats()


def nats_to_bits(x: float) -> float:
    return x / math.log(2)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- a whole data set -----------------------------------------------------------------------------

@dataclass(frozen=True)
class TextData:
    """Train and validation bytes with their digests; `floor_nats` is the entropy rate where known."""

    name: str
    train: bytes
    val: bytes
    train_sha256: str
    val_sha256: str
    floor_nats: float | None = None

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "train_bytes": len(self.train), "val_bytes": len(self.val),
                "train_sha256": self.train_sha256, "val_sha256": self.val_sha256, "floor_nats": self.floor_nats}


def smoke_text(seed: int = DEFAULT_SEED, train_bytes: int = SMOKE_TRAIN_BYTES, val_bytes: int = SMOKE_VAL_BYTES,
               order: int = DEFAULT_ORDER) -> TextData:
    """llm-smoke's train and validation text (1 MiB takes about half a second to generate)."""
    train, val = generate(train_bytes, seed, "train", order=order), generate(val_bytes, seed, "val", order=order)
    return TextData(f"llm-smoke/seed{seed}/order{order}", train, val, sha256(train), sha256(val),
                    entropy_rate_nats(seed, order))


def split_corpus(data: bytes, name: str, val_fraction: float = VAL_FRACTION) -> TextData:
    """The last `val_fraction` of `data` as validation, the rest as training (a deterministic cut)."""
    if not 0 < val_fraction < 1:
        raise TextError(f"val_fraction must be in (0, 1), got {val_fraction}")
    cut = len(data) - int(len(data) * val_fraction)
    if cut < 2 or len(data) - cut < 2:
        raise TextError(f"{name}: {len(data)} bytes is too short a corpus")
    train, val = data[:cut], data[cut:]
    return TextData(name, train, val, sha256(train), sha256(val))


def read_corpus(path: str | Path, val_fraction: float = VAL_FRACTION) -> TextData:
    """A plain text file as bytes (byte-level: no decoding, no tokenizer), split by `split_corpus`."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise TextError(f"cannot read the corpus {p}: {exc}") from None
    return split_corpus(data, p.name, val_fraction)


# ---- the King James Bible, from Debian's bible-kjv-text -------------------------------------------

KJV_NAME = "kjv/bible-kjv-text"
"""The data name of the llm-kjv preset's text."""
KJV_PACKAGES = ("bible-kjv", "bible-kjv-text")
"""Debian's reader (`bible`) and its compressed text (`/usr/lib/bible.data`)."""
KJV_COMMAND = "bible"
KJV_DATA_DIR = "/usr/lib"
KJV_DATA_FILE = "bible.data"
KJV_RANGE = "Gen1:1-Rev22:21"
KJV_BYTES = 4_404_412
KJV_SHA256 = "cd45f0c9cedab8e4439bd6486c8952c77cc8b0ecc5d1f6ae3513f2039f47229d"
"""The whole extracted text (bible-kjv 4.38, bible-kjv-text 4.38): `bible -f -p /usr/lib Gen1:1-Rev22:21 |
sha256sum`."""
KJV_TIMEOUT_S = 120.0
_INSTALL_HINT = f"apt-get install {' '.join(KJV_PACKAGES)}"


def extract_kjv(command: str = KJV_COMMAND, data_dir: str | Path = KJV_DATA_DIR) -> bytes:
    """The whole King James text as `bible` prints it with pretty-printing off (see the module docstring).

    `command` and `data_dir` locate the reader and the folder of its `bible.data`; TextError, naming the
    Debian packages to install, when either is missing or the reader fails or prints nothing."""
    exe = shutil.which(command)
    if exe is None:
        raise TextError(f"the llm-kjv text needs the `{command}` command, from Debian's bible-kjv package, and "
                        f"its text, from bible-kjv-text: {_INSTALL_HINT}")
    data_file = Path(data_dir) / KJV_DATA_FILE
    if not data_file.is_file():
        raise TextError(f"the llm-kjv text needs {data_file}, from Debian's bible-kjv-text package: "
                        f"{_INSTALL_HINT}")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["LC_ALL"] = "C"
    try:
        proc = subprocess.run([exe, "-f", "-p", str(data_dir), KJV_RANGE], stdin=subprocess.DEVNULL,
                              capture_output=True, env=env, timeout=KJV_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TextError(f"`{command} -f -p {data_dir} {KJV_RANGE}` failed ({exc}); {_INSTALL_HINT}") from None
    if proc.returncode != 0 or not proc.stdout or proc.stderr.strip():
        why = proc.stderr.decode(errors="replace").strip() or "no text"
        raise TextError(f"`{command} -f -p {data_dir} {KJV_RANGE}` exited {proc.returncode}: {why} "
                        f"(are {' and '.join(KJV_PACKAGES)} installed? {_INSTALL_HINT})")
    return proc.stdout


def _read_checked(path: Path, digest: str) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data if sha256(data) == digest else None


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the copy from other users sharing the cache
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def kjv_text(command: str = KJV_COMMAND, data_dir: str | Path = KJV_DATA_DIR, *,
             cache_dir: str | Path | None = None, use_cache: bool = True) -> bytes:
    """The whole King James text: from the cache (`cache_dir`, default `data.idx.cache_root()`) when a file
    there has the digest KJV_SHA256, else extracted (`extract_kjv`) and, when it has that digest, cached.

    A text with another digest (another version of the packages) is returned uncached: the preset's
    digests then reject it where the text is used."""
    path = None
    if use_cache:
        from .idx import cache_root

        path = (Path(cache_dir) if cache_dir is not None else cache_root()) / f"kjv-{KJV_SHA256[:24]}.txt"
        cached = _read_checked(path, KJV_SHA256)
        if cached is not None:
            return cached
    data = extract_kjv(command, data_dir)
    if path is not None and sha256(data) == KJV_SHA256:
        with contextlib.suppress(OSError):  # no cache (read-only home): every trial extracts the text itself
            _write_atomic(path, data)
    return data


def kjv_data(command: str = KJV_COMMAND, data_dir: str | Path = KJV_DATA_DIR, *,
             cache_dir: str | Path | None = None, use_cache: bool = True) -> TextData:
    """llm-kjv's train and validation text: `kjv_text` split by `split_corpus`, its last VAL_FRACTION the
    validation part (220,220 bytes, from the middle of Colossians 1:10 to the end; 4,184,192 training)."""
    return split_corpus(kjv_text(command, data_dir, cache_dir=cache_dir, use_cache=use_cache), KJV_NAME)
