"""AIPerf-LLM's pre-tokenised shards (presets `llm`, `llm-bytes`): llm.c's token files, their manifest, and reading
them for training.

**Shards** are llm.c's `.bin` files as `dev/data/fineweb.py` (`write_datafile`) writes them, so a site that has
tokenised FineWeb or FineWeb-Edu with GPT-2's tokenizer uses its files as they are: a header of 256 little-endian
int32 (`MAGIC` 20240520, `VERSION` 1, the token count, the rest zero), then that many uint16 tokens, nothing after.
The shards of a corpus are the `*.bin` files of one directory; a file whose name contains `val` belongs to the
validation split, every other one to the training split (llm.c names its first shard `..._val_000000.bin` and
the others `..._train_NNNNNN.bin`); each split's shards are read in the order of their names.

**The manifest** `aiperf-llm-shards.json` (`write_manifest`) sits beside them: `format` (`FORMAT`), `header` (the
shard format: magic, version, header bytes, token dtype), `tokenizer` and `vocab` (every token is below it),
per split its `tokens` and its `shards` (name, sha256, tokens), and `digest`, the SHA-256 of the manifest without
it (canonical JSON: sorted keys, no spaces; as data/shards.py's image packs). Nothing in it depends on where or
when it was written: the same shards give the same digest anywhere. A run records the digest (run.json
`dataset.digest`, with the tokenizer and the token counts: `dataset_facts`), every trial refuses shards whose
manifest has another, and `verify` re-hashes every shard against it (a changed byte names its shard).

**Reading** (`TokenShards`): each shard memory-mapped (numpy, lazily, in the process that reads), so the ranks and
slots of a node share the page cache and a 10-billion-token corpus costs no memory. Training windows of
`seq_len + 1` tokens lie inside one shard: the `window_count(seq_len)` possible starts are numbered shard after
shard and `windows(index, seq_len)` gathers them (the trainer draws the numbers: train/llm/trainer.py), so a
corpus of one shard gives exactly the windows the byte presets' trainer draws from the same bytes. The frozen
evaluation reads the first `eval_tokens` tokens of the validation split (`head`).

**Byte-level shards** (`write_shards`): any text files, as bytes (tokenizer `bytes`, vocabulary 256, a token is a
byte), written in this same format with a manifest, so the path can be tried on a CPU with nothing downloaded
(preset `llm-bytes`). The first `val_tokens` bytes are the validation shard (llm.c's order: the held-out shard
comes first), the rest training shards of at most `shard_tokens`. GPT-2's tokenizer is not built in: tokenise with
llm.c's scripts, then `write_manifest` (`aiperf-runner stage --workload llm --manifest DIR`).

Torch-free (data/ sits below train/).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.llmrules import SHARD_FORMAT, LlmPreset

FORMAT = SHARD_FORMAT
MANIFEST = "aiperf-llm-shards.json"
MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
TOKEN_DTYPE = np.dtype("<u2")
HEADER = {"magic": MAGIC, "version": VERSION, "header_bytes": HEADER_BYTES, "token_dtype": "uint16"}
SPLITS = ("train", "val")
TOKENIZERS = {"gpt2": 50257, "bytes": 256}
"""Known tokenizers and their vocabularies (a manifest may name another; its vocabulary must fit uint16)."""
MAX_VOCAB = 1 << 16
DEFAULT_VAL_TOKENS = 65_536
"""write_shards' validation split: the `llm-bytes` preset's evaluation reads this many tokens."""
DEFAULT_SHARD_TOKENS = 100_000_000
"""llm.c's shard size (fineweb.py's default)."""
_CHUNK = 8 << 20  # bytes hashed at a time (even: tokens never straddle two chunks)


class ShardError(AiperfError, ValueError):
    """Shards or a manifest that cannot be used: missing, malformed, changed, or not what a preset binds."""


# ---- one shard ---------------------------------------------------------------------------------------------

def split_of(name: str) -> str:
    """The split of a shard file: `val` when its name contains "val" (llm.c's convention), else `train`."""
    return "val" if "val" in name else "train"


def shard_files(root: str | Path) -> list[Path]:
    """The `*.bin` regular files directly in `root`, by name."""
    root = Path(root)
    try:
        entries = sorted(root.iterdir())
    except OSError as exc:
        raise ShardError(f"{root}: {exc.strerror or exc}") from None
    return [p for p in entries if p.suffix == ".bin" and p.is_file()]


def header(tokens: int) -> bytes:
    """llm.c's header for a shard of `tokens` tokens."""
    if not 0 <= tokens < 2**31:
        raise ShardError(f"{tokens} tokens do not fit a shard's header (at most 2**31 - 1)")
    h = np.zeros(HEADER_INTS, dtype="<i4")
    h[0], h[1], h[2] = MAGIC, VERSION, tokens
    return h.tobytes()


def read_header(path: Path) -> int:
    """The token count of shard `path`, after checking its header and its size; ShardError naming the file."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(HEADER_BYTES)
            size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise ShardError(f"{path}: {exc.strerror or exc}") from None
    if len(raw) < HEADER_BYTES:
        raise ShardError(f"{path}: {size} bytes, shorter than the {HEADER_BYTES}-byte header of a token shard")
    magic, version, tokens = (int(v) for v in np.frombuffer(raw, dtype="<i4", count=3))
    if magic != MAGIC:
        raise ShardError(f"{path}: magic {magic}, not llm.c's {MAGIC} (a token shard has a 256 x int32 header; "
                         "nanoGPT's headerless .bin files are not read)")
    if version != VERSION:
        raise ShardError(f"{path}: version {version}; this reader takes version {VERSION} (uint16 tokens)")
    want = HEADER_BYTES + tokens * TOKEN_DTYPE.itemsize
    if tokens < 0 or size != want:
        raise ShardError(f"{path}: {size} bytes, its header says {tokens} tokens ({want} bytes): truncated or "
                         "not a token shard")
    return tokens


def _scan(path: Path) -> tuple[str, int]:
    """(sha256 of the whole file, its largest token; -1 when it has none)."""
    h, top = hashlib.sha256(), -1
    with open(path, "rb") as fh:
        first = fh.read(HEADER_BYTES)
        h.update(first)
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
            top = max(top, int(np.frombuffer(chunk, dtype=TOKEN_DTYPE).max()))
    return h.hexdigest(), top


# ---- the manifest ------------------------------------------------------------------------------------------

def manifest_digest(manifest: dict[str, Any]) -> str:
    """SHA-256 of the manifest without its `digest` (canonical JSON: sorted keys, no spaces)."""
    body = {k: v for k, v in manifest.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _check_tokenizer(tokenizer: str, vocab: int) -> None:
    if not tokenizer or not isinstance(tokenizer, str):
        raise ShardError("name the tokenizer (e.g. gpt2)")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or not 1 <= vocab <= MAX_VOCAB:
        raise ShardError(f"vocabulary {vocab!r}: uint16 tokens allow 1 to {MAX_VOCAB}")
    known = TOKENIZERS.get(tokenizer)
    if known is not None and vocab != known:
        raise ShardError(f"tokenizer {tokenizer}'s vocabulary is {known}, not {vocab}")


def write_manifest(root: str | Path, tokenizer: str, vocab: int, workers: int = 8) -> dict[str, Any]:
    """The manifest of the shards in `root` (every `*.bin` file there), written to `root/MANIFEST` and returned.

    Every shard's header and size are checked, its bytes hashed (`workers` files at once) and its tokens checked
    to lie below `vocab`; ShardError naming the file otherwise, or when a split has no shard."""
    root = Path(root)
    _check_tokenizer(tokenizer, vocab)
    files = shard_files(root)
    counts = [read_header(p) for p in files]
    with ThreadPoolExecutor(max(1, workers)) as pool:  # hashing releases the interpreter lock
        scans = list(pool.map(_scan, files))
    splits: dict[str, Any] = {s: {"tokens": 0, "shards": []} for s in SPLITS}
    for path, tokens, (sha, top) in zip(files, counts, scans, strict=True):
        if top >= vocab:
            raise ShardError(f"{path}: token {top} is outside a vocabulary of {vocab} ({tokenizer})")
        split = splits[split_of(path.name)]
        split["shards"].append({"name": path.name, "sha256": sha, "tokens": tokens})
        split["tokens"] += tokens
    for name, split in splits.items():
        if not split["shards"]:
            raise ShardError(f"{root}: no {name} shard (*.bin files; a name containing 'val' is a validation shard, "
                             "any other a training shard)")
    manifest: dict[str, Any] = {"format": FORMAT, "header": dict(HEADER), "tokenizer": tokenizer, "vocab": vocab,
                                "splits": splits}
    manifest["digest"] = manifest_digest(manifest)
    tmp = root / f".{MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")
    os.replace(tmp, root / MANIFEST)
    return manifest


def read_manifest(root: str | Path) -> dict[str, Any]:
    """The manifest in `root`, its format and digest checked; ShardError when it is missing, malformed or edited."""
    path = Path(root) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise ShardError(f"{path}: no manifest (write it with `aiperf-runner stage --workload llm --manifest "
                         f"{Path(root)} --tokenizer NAME --vocab N`)") from None
    except (OSError, ValueError) as exc:
        raise ShardError(f"{path}: cannot be read: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ShardError(f"{path}: not a manifest of format {FORMAT}")
    if manifest.get("digest") != manifest_digest(manifest):
        raise ShardError(f"{path}: its digest does not match its content (edited?)")
    try:
        for split in SPLITS:
            for shard in manifest["splits"][split]["shards"]:
                if Path(shard["name"]).name != shard["name"]:
                    raise ShardError(f"{path}: shard name {shard['name']!r} is not a file name")
    except (KeyError, TypeError):
        raise ShardError(f"{path}: malformed (each split needs its shards)") from None
    return manifest


def verify(root: str | Path, full: bool = True, splits: Sequence[str] = SPLITS, workers: int = 8) -> dict[str, Any]:
    """The manifest of the shards in `root` once checked: its digest, the shard files of `splits` against it
    (none missing, none unlisted), every header and size, and with `full` (the default) every shard re-hashed
    and its tokens checked against the vocabulary. ShardError naming the shard that differs."""
    root = Path(root)
    manifest = read_manifest(root)
    listed = {s["name"]: (split, s) for split in splits for s in manifest["splits"][split]["shards"]}
    present = {p.name for p in shard_files(root) if split_of(p.name) in splits}
    unlisted, missing = sorted(present - set(listed)), sorted(set(listed) - present)
    if unlisted:
        raise ShardError(f"{root / unlisted[0]}: a shard the manifest does not list (write the manifest again)")
    if missing:
        raise ShardError(f"{root / missing[0]}: missing (the manifest lists it)")
    paths = [root / name for name in sorted(listed)]
    for path in paths:
        tokens = read_header(path)
        if tokens != listed[path.name][1]["tokens"]:
            raise ShardError(f"{path}: {tokens} tokens, the manifest says {listed[path.name][1]['tokens']}")
    if full:
        with ThreadPoolExecutor(max(1, workers)) as pool:
            scans = list(pool.map(_scan, paths))
        for path, (sha, top) in zip(paths, scans, strict=True):
            if sha != listed[path.name][1]["sha256"]:
                raise ShardError(f"{path}: sha256 differs from the manifest's (the shard changed or is damaged)")
            if top >= int(manifest["vocab"]):
                raise ShardError(f"{path}: token {top} is outside the manifest's vocabulary of {manifest['vocab']}")
    return manifest


def dataset_facts(manifest: dict[str, Any]) -> dict[str, Any]:
    """What run.json's `dataset` block records of a manifest (beside the preset's own facts)."""
    splits = manifest["splits"]
    return {"format": manifest["format"], "tokenizer": manifest["tokenizer"], "vocab": manifest["vocab"],
            "digest": manifest["digest"], "train_tokens": int(splits["train"]["tokens"]),
            "val_tokens": int(splits["val"]["tokens"]), "train_shards": len(splits["train"]["shards"]),
            "val_shards": len(splits["val"]["shards"])}


def check_preset(manifest: dict[str, Any], preset: LlmPreset) -> dict[str, Any]:
    """run.json's `dataset` block for `preset` on these shards; ShardError when they are not what it binds."""
    if preset.shards is None:
        raise ShardError(f"{preset.name} does not read token shards")
    dataset = {**preset.to_json(), **dataset_facts(manifest)}
    problems = preset.shards.problems(dataset)
    if problems:
        raise ShardError(f"these shards do not fit the {preset.name} preset: {'; '.join(problems)}")
    return dataset


# ---- reading -----------------------------------------------------------------------------------------------

class TokenShards:
    """One split's shards, memory-mapped lazily: `tokens`, `window_count`, `windows`, `head`."""

    def __init__(self, root: str | Path, split: str, manifest: dict[str, Any] | None = None) -> None:
        self.root, self.split = Path(root), split
        manifest = manifest if manifest is not None else read_manifest(root)
        self.digest: str = manifest["digest"]
        self.vocab = int(manifest["vocab"])
        shards = manifest["splits"][split]["shards"]
        self.names = [str(s["name"]) for s in shards]
        self.sizes = np.array([int(s["tokens"]) for s in shards], dtype=np.int64)
        self._maps: dict[int, np.ndarray] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_maps": {}}  # maps are opened again in the process that reads

    @property
    def tokens(self) -> int:
        return int(self.sizes.sum())

    def shard(self, i: int) -> np.ndarray:
        """Shard `i`'s tokens (a read-only memory map)."""
        m = self._maps.get(i)
        if m is None:
            n = int(self.sizes[i])
            m = (np.memmap(self.root / self.names[i], dtype=TOKEN_DTYPE, mode="r", offset=HEADER_BYTES, shape=(n,))
                 if n else np.zeros(0, dtype=TOKEN_DTYPE))
            self._maps[i] = m
        return m

    def _starts(self, seq_len: int) -> np.ndarray:
        return np.maximum(self.sizes - seq_len, 0)

    def window_count(self, seq_len: int) -> int:
        """How many windows of `seq_len + 1` tokens lie inside a shard: their starts, numbered shard after shard."""
        return int(self._starts(seq_len).sum())

    def windows(self, index: Iterable[int] | np.ndarray, seq_len: int) -> np.ndarray:
        """Windows number `index` (0 <= i < window_count): (n, seq_len + 1) int64, input = [:, :-1],
        target = [:, 1:]."""
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        counts = self._starts(seq_len)
        ends = np.cumsum(counts)
        if len(index) and (index.min() < 0 or index.max() >= (ends[-1] if len(ends) else 0)):
            raise IndexError(f"window numbers outside 0..{self.window_count(seq_len) - 1}")
        which = np.searchsorted(ends, index, side="right")
        starts = index - (ends[which] - counts[which])
        out = np.empty((len(index), seq_len + 1), dtype=np.int64)
        for row, (i, s) in enumerate(zip(which.tolist(), starts.tolist(), strict=True)):
            out[row] = self.shard(i)[s:s + seq_len + 1]
        return out

    def batch(self, index: Iterable[int] | np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets) of windows `index`: (n, seq_len) each, the targets the inputs moved by one token."""
        w = self.windows(index, seq_len)
        return w[:, :-1], w[:, 1:]

    def head(self, n: int) -> np.ndarray:
        """The split's first `n` tokens (across its shards in order), copied into memory; ShardError if fewer."""
        if n > self.tokens:
            raise ShardError(f"{self.root}: the {self.split} split holds {self.tokens:,} tokens, {n:,} are read")
        parts, left = [], n
        for i in range(len(self.names)):
            if left <= 0:
                break
            part = np.asarray(self.shard(i)[:left])
            parts.append(part)
            left -= len(part)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=TOKEN_DTYPE)


@dataclass(frozen=True)
class TokenData:
    """A shard preset's data as a trial reads it: `train` (None when only the validation split was opened) and
    `val`, the frozen evaluation's tokens (the first `eval_tokens` of the validation split)."""

    name: str
    train: TokenShards | None
    val: np.ndarray
    digest: str
    tokenizer: str
    vocab: int


def open_for_preset(root: str | Path, preset: LlmPreset, digest: str | None = None, *,
                    train: bool = True) -> TokenData:
    """The shards at `root` for `preset`: the manifest read (its digest checked, and equal to `digest`, the run's,
    when given), checked against the preset's binding, each shard's header and size checked (not re-hashed: the
    run did that before its clock started; `verify`), and the validation tokens read. ShardError otherwise."""
    if preset.shards is None:
        raise ShardError(f"{preset.name} does not read token shards")
    root = Path(root)
    manifest = read_manifest(root)
    if digest is not None and manifest["digest"] != digest:
        raise ShardError(f"{root}: the manifest's digest {manifest['digest'][:16]}... is not the run's "
                         f"{digest[:16]}... (other shards than the run verified)")
    check_preset(manifest, preset)
    verify(root, full=False, splits=SPLITS if train else ("val",))
    val = TokenShards(root, "val", manifest)
    return TokenData(preset.data, TokenShards(root, "train", manifest) if train else None,
                     val.head(preset.shards.eval_tokens), manifest["digest"], manifest["tokenizer"],
                     int(manifest["vocab"]))


# ---- byte-level shards -------------------------------------------------------------------------------------

def text_files(paths: Sequence[str | Path]) -> list[Path]:
    """The files named, a directory's regular files (recursively, by relative name) in its place; a file reached
    twice (a symbolic link to a file already taken) is read once."""
    out: list[Path] = []
    seen: set[Path] = set()
    for given in map(Path, paths):
        if given.is_dir():
            found = sorted((p for p in given.rglob("*") if p.is_file()), key=lambda p: p.relative_to(given).parts)
        elif given.is_file():
            found = [given]
        else:
            raise ShardError(f"{given}: no such file or directory")
        for p in found:
            real = p.resolve()
            if real not in seen:
                seen.add(real)
                out.append(p)
    if not out:
        raise ShardError(f"no text file in {', '.join(map(str, paths))}")
    return out


@dataclass
class StageResult:
    """What `write_shards` did: `written` False when `out` already held shards with a manifest (verified)."""

    path: Path
    manifest: dict[str, Any]
    written: bool
    seconds: float
    files: int = 0


def _write_shard(path: Path, tokens: np.ndarray) -> None:
    with open(path, "wb") as fh:
        fh.write(header(len(tokens)))
        fh.write(np.ascontiguousarray(tokens, dtype=TOKEN_DTYPE).tobytes())


def write_shards(text: Sequence[str | Path], out: str | Path, tokenizer: str = "bytes",
                 val_tokens: int = DEFAULT_VAL_TOKENS, shard_tokens: int = DEFAULT_SHARD_TOKENS,
                 prefix: str = "text") -> StageResult:
    """Byte-level shards of the text files `text` (`text_files`: files, or directories of them, concatenated in
    that order) and their manifest in `out`: `{prefix}_val_000000.bin` holds the first `val_tokens` bytes, then
    `{prefix}_train_000001.bin`... the rest, `shard_tokens` at most each. Written in a temporary directory beside
    `out` and renamed when complete; `out` already holding a manifest is verified instead, not rewritten."""
    start = time.monotonic()
    if tokenizer != "bytes":
        raise ShardError(f"tokenizer {tokenizer!r} is not built in: only 'bytes' (a token is a byte) is; tokenise "
                         "with llm.c's dev/data scripts, then `aiperf-runner stage --workload llm --manifest DIR "
                         "--tokenizer NAME --vocab N`")
    if val_tokens < 1 or shard_tokens < 1:
        raise ShardError("val_tokens and shard_tokens must be positive")
    out = Path(out)
    if out.exists():
        if not (out / MANIFEST).is_file():
            raise ShardError(f"{out} exists and holds no {MANIFEST}: remove it or choose another --to")
        return StageResult(out, verify(out), False, time.monotonic() - start)
    files = text_files(text)
    data = b"".join(p.read_bytes() for p in files)
    if len(data) <= val_tokens:
        raise ShardError(f"{len(data):,} bytes of text: the validation shard takes the first {val_tokens:,}, "
                         "nothing is left to train on")
    tokens = np.frombuffer(data, dtype=np.uint8)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        tmp.mkdir()
        _write_shard(tmp / f"{prefix}_val_{0:06d}.bin", tokens[:val_tokens])
        for n, at in enumerate(range(val_tokens, len(tokens), shard_tokens), 1):
            _write_shard(tmp / f"{prefix}_train_{n:06d}.bin", tokens[at:at + shard_tokens])
        manifest = write_manifest(tmp, tokenizer, TOKENIZERS[tokenizer])
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return StageResult(out, manifest, True, time.monotonic() - start, len(files))
