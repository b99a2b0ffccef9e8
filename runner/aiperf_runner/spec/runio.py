"""Reading a run directory as a stream (docs/internals.md, "Run directory").

`RunDir` gives run.json, the main event log (hash chain checked while streaming, via
`eventlog.iter_events`) and the per-trial files. Trial graphs are read lazily, one trial at a time,
and what verification needs of them (the canonical architecture hash and the FLOPs per image) is
cached by the SHA-256 of the graph file's bytes: a run of 20,000 trials keeps 20,000 small cache
entries, never 20,000 graphs. Nothing here holds the event log in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from . import presetfacts
from .errors import AiperfError
from .eventlog import Event, iter_events
from .fields import TRIAL_ID
from .graph import Graph
from .procpool import SharedPool, process_pool

RUN_JSON = "run.json"
EVENTS = "events.jsonl"
TRIALS = "trials"

DEFAULT_KERNEL_SIZE = 3


class RunIOError(AiperfError, ValueError):
    """A run directory, or one of its files, that cannot be read; the message names the file."""


@dataclass
class ArchInfo:
    """What verification needs of one architecture graph file (shared by trials with equal bytes)."""

    digest: str  # SHA-256 of the graph file's bytes
    arch_hash: str | None = None  # Graph.hash() of the canonical form; None if the graph is invalid
    error: str | None = None
    flops: dict[tuple[str, int], Any] = field(default_factory=dict)  # (rules, kernel_size) -> FlopCounts
    input_shape: tuple[int, ...] | None = None  # of the graph's input node, e.g. (3, 224, 224)
    output_shape: tuple[int, ...] | None = None  # of its output node: (classes,) for a classifier
    layers: int | None = None  # how many layers (the search's bound on it: spec/seeds.py)


PREFETCH_MIN_DISTINCT = 64
"""`RunDir.prefetch` uses processes only from this many distinct graphs on (process start-up costs)."""
PREFETCH_MIN_TRIALS = 2048
"""... and reads the trials' files in processes from this many trials on."""


class HparamsFacts(NamedTuple):
    """What verification needs of a trial's hparams.json (spec/bound.py): the SHA-256 of its
    canonical JSON, or the RunIOError message of a file that cannot be read; the preset's space's
    problems with it."""

    canonical: bytes | None
    error: str | None
    problems: tuple[str, ...]


def canonical_digest(d: Mapping[str, Any]) -> bytes:
    """SHA-256 of `d` as canonical JSON (keys sorted, no spaces): hyper-parameters compare by it."""
    return hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode()).digest()


Analysis = tuple[str | None, str | None, dict[tuple[str, int], Any], tuple[int, ...] | None, tuple[int, ...] | None,
                 int | None]
"""(canonical hash, error, {(rules, kernel_size): FlopCounts}, input shape, output shape, layers)"""


def _analyse(raw: bytes, flops_keys: list[tuple[str, int]], want_hash: bool) -> Analysis:
    """What verification needs of one graph file's bytes (see `Analysis`)."""
    flops: dict[tuple[str, int], Any] = {}
    try:
        graph = Graph.from_json(json.loads(raw))
        for rules, ks in flops_keys:
            from .flops import flops_per_image  # torch-free, like everything in spec/

            flops[(rules, ks)] = flops_per_image(graph, rules=rules, kernel_size=ks)  # validates first
        if not flops_keys:
            graph.validate()
        shapes = tuple(graph.nodes[graph.input_node]), tuple(graph.nodes[graph.output_node])
        return (graph.hash() if want_hash else None), None, flops, *shapes, len(graph.layers)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError,
            ArithmeticError) as exc:  # OverflowError: int() of an infinite parameter (tests/fuzz)
        return None, str(exc) or type(exc).__name__, flops, None, None, None


def _analyse_batch(items: list[tuple[str, str, list[tuple[str, int]]]]) -> list[tuple[str, Analysis]]:
    """Process-pool task: [(digest, path, flops keys)] -> [(digest, analysis)]."""
    out: list[tuple[str, Analysis]] = []
    for digest, path, keys in items:
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            out.append((digest, (None, f"cannot be read ({exc.strerror})", {}, None, None, None)))
            continue
        out.append((digest, _analyse(raw, keys, True)))
    return out


def _read_trials(root: str, trials: list[str], preset: str | None,
                 v1: bool) -> list[tuple[str, str | None, HparamsFacts, int | None]]:
    """Process-pool task: each trial's graph.json digest (None: unreadable; `arch` reports it), its
    hparams facts and, for v1-compat, its kernel size (None where `kernel_size` would raise)."""
    run, space = RunDir(root), getattr(presetfacts.get(preset), "space", None)
    out = []
    for trial in trials:
        try:
            with open(os.path.join(root, TRIALS, trial, "graph.json"), "rb") as fh:
                digest: str | None = hashlib.sha256(fh.read()).hexdigest()
        except OSError:
            digest = None
        ks = None
        if v1:
            try:
                ks = run.kernel_size(trial)
            except RunIOError:
                pass
        out.append((trial, digest, run.hparams_facts(trial, space), ks))
    return out


def _merge(info: ArchInfo, analysis: Analysis) -> None:
    arch_hash, error, flops, input_shape, output_shape, layers = analysis
    if arch_hash is not None:
        info.arch_hash = arch_hash
    if error is not None:
        info.error = error
    info.flops.update(flops)
    if input_shape is not None:
        info.input_shape, info.output_shape = input_shape, output_shape
    if layers is not None:
        info.layers = layers


def _check_trial(trial: Any) -> None:
    """A trial id that names a directory under trials/ and nothing else (the log names them)."""
    if not isinstance(trial, str) or not TRIAL_ID.fullmatch(trial):
        raise RunIOError(f"invalid trial id {trial!r} (expected t0000, t0001, ...)")


class RunDir:
    """A run directory read lazily: `run`, `events()`, `trial_flops(trial, rules)`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._root = str(self.path)
        if not self.path.is_dir():
            raise RunIOError(f"{self.path} is not a directory")
        self._run: dict[str, Any] | None = None
        self._arch_by_digest: dict[str, ArchInfo] = {}
        self._digest_by_trial: dict[str, str] = {}
        self._kernel_by_trial: dict[str, int] = {}
        self._hparams_facts: dict[str, HparamsFacts] = {}

    # ---- run.json ------------------------------------------------------------------------------
    @property
    def run_json_path(self) -> Path:
        return self.path / RUN_JSON

    @property
    def run(self) -> dict[str, Any]:
        """run.json as a dict; RunIOError if it is missing or not a JSON object."""
        if self._run is None:
            try:
                data = json.loads(self.run_json_path.read_bytes())
            except FileNotFoundError:
                raise RunIOError(f"{RUN_JSON} missing in {self.path}") from None
            except (ValueError, UnicodeDecodeError) as exc:
                raise RunIOError(f"{RUN_JSON} is not valid JSON ({exc})") from None
            except OSError as exc:
                raise RunIOError(f"{RUN_JSON} cannot be read ({exc.strerror})") from None
            if not isinstance(data, dict):
                raise RunIOError(f"{RUN_JSON} is not a JSON object")
            self._run = data
        return self._run

    # ---- the main log ----------------------------------------------------------------------------
    @property
    def events_path(self) -> Path:
        return self.path / EVENTS

    def events(self, *, allow_partial_tail: bool = False) -> Iterator[Event]:
        """The main log's events in order; LogError at the first line that breaks the chain."""
        if not self.events_path.is_file():
            raise RunIOError(f"{EVENTS} missing in {self.path}")
        return iter_events(self.events_path, allow_partial_tail=allow_partial_tail)

    def scans(self, workers: int | None = None, limits: Any = None, shared: SharedPool | None = None) -> Iterator[Any]:
        """The main log, checked as `events()` checks it, in scanned chunks (spec/logchunks.py
        `iter_scans`: a large log is read in `workers` processes, `shared`'s if given; `limits`:
        epochscan.EpochLimits)."""
        from .logchunks import iter_scans

        if not self.events_path.is_file():
            raise RunIOError(f"{EVENTS} missing in {self.path}")
        return iter_scans(self.events_path, workers, limits=limits, shared=shared)

    # ---- trials ------------------------------------------------------------------------------
    def trial_dir(self, trial: str) -> Path:
        _check_trial(trial)
        return self.path / TRIALS / trial

    def hparams(self, trial: str) -> dict[str, Any]:
        """trials/<id>/hparams.json (not cached: read it once per trial)."""
        _check_trial(trial)
        try:
            with open(os.path.join(self._root, TRIALS, trial, "hparams.json"), "rb") as fh:  # no pathlib: per trial
                data = json.loads(fh.read())
        except FileNotFoundError:
            raise RunIOError(f"trials/{trial}/hparams.json missing") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise RunIOError(f"trials/{trial}/hparams.json is not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise RunIOError(f"trials/{trial}/hparams.json is not a JSON object")
        return data

    def hparams_facts(self, trial: str, space: Any) -> HparamsFacts:
        """What `integrity.bound` checks of hparams.json (prefetched, else read now; not kept)."""
        facts = self._hparams_facts.pop(trial, None)
        if facts is not None:
            return facts
        try:
            hp = self.hparams(trial)
        except RunIOError as exc:
            return HparamsFacts(None, str(exc), ())
        return HparamsFacts(canonical_digest(hp), None, tuple(space.problems(hp)) if space is not None else ())

    def kernel_size(self, trial: str) -> int:
        """The trial's `kernel_size` hyper-parameter (default 3), read from hparams.json once."""
        ks = self._kernel_by_trial.get(trial)
        if ks is None:
            value = self.hparams(trial).get("kernel_size", DEFAULT_KERNEL_SIZE)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 1:
                raise RunIOError(f"trials/{trial}/hparams.json: kernel_size {value!r} is not a positive integer")
            ks = self._kernel_by_trial[trial] = int(value)
        return ks

    def arch(self, trial: str, flops_key: tuple[str, int] | None = None) -> ArchInfo:
        """The trial's graph file digested, parsed, validated and hashed (cached by file bytes).

        With `flops_key` = (rules, kernel_size), the FLOPs under those rules are counted too while
        the parsed graph is at hand. Parsed graphs are not kept.
        """
        digest = self._digest_by_trial.get(trial)
        info = self._arch_by_digest.get(digest) if digest is not None else None
        if info is not None and (flops_key is None or info.error is not None or flops_key in info.flops):
            return info
        path = self.trial_dir(trial) / "graph.json"
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise RunIOError(f"trials/{trial}/graph.json missing") from None
        except OSError as exc:
            raise RunIOError(f"trials/{trial}/graph.json cannot be read ({exc.strerror})") from None
        digest = hashlib.sha256(raw).hexdigest()
        self._digest_by_trial[trial] = digest
        info = self._arch_by_digest.get(digest)
        if info is not None and (flops_key is None or info.error is not None or flops_key in info.flops):
            return info
        if info is None:
            info = self._arch_by_digest[digest] = ArchInfo(digest)
        _merge(info, _analyse(raw, [flops_key] if flops_key is not None else [], info.arch_hash is None))
        return info

    def trial_flops(self, trial: str, rules: str) -> Any:
        """FlopCounts of the trial's graph under `rules` (v1-compat: with the trial's kernel_size).

        Raises RunIOError when the graph or hyper-parameters cannot be read or are invalid.
        """
        ks = self.kernel_size(trial) if rules == "v1-compat" else DEFAULT_KERNEL_SIZE
        key = (rules, ks)
        info = self.arch(trial, key)
        if info.error is not None:
            raise RunIOError(f"trials/{trial}/graph.json: {info.error}")
        return info.flops[key]

    # ---- parallel prefetch -------------------------------------------------------------------------
    def prefetch(self, rules: str, workers: int | None = None, min_distinct: int = PREFETCH_MIN_DISTINCT,
                 preset: str | None = None, shared: SharedPool | None = None) -> int:
        """Analyse every trial's graph up front, the distinct ones in `workers` processes.

        Reads and digests each trials/<id>/graph.json (and, for v1-compat, the kernel_size of its
        hparams.json), then hashes and counts the FLOPs of each distinct (graph, kernel_size) in a
        process pool. From `PREFETCH_MIN_TRIALS` trials on, the files are read in the pool too, and
        each hparams.json's facts for `integrity.bound` (under `preset`'s space) are kept until
        `hparams_facts` asks for them. Later `arch` / `trial_flops` calls are cache hits.
        Does nothing (and returns 0) with fewer than `min_distinct` distinct graphs, one worker, or
        where processes cannot be started (e.g. inside a daemonic worker process): the lazy path
        then does the same work one graph at a time. Returns the number of graphs analysed here.
        `shared`: the pool to use (verify's, kept open for the log), else one made and ended here.
        """
        workers = workers if workers is not None else (os.cpu_count() or 1)
        if workers < 2:
            return 0
        trials_dir = self.path / TRIALS
        if not trials_dir.is_dir():
            return 0
        names = sorted(e.name for e in os.scandir(trials_dir)
                       if TRIAL_ID.fullmatch(e.name) and e.is_dir(follow_symlinks=False))
        v1 = rules == "v1-compat"
        pool = None

        def get_pool(n: int) -> Any:
            return shared.get() if shared is not None else process_pool(n)

        try:
            if len(names) >= PREFETCH_MIN_TRIALS:
                pool = get_pool(workers)
            todo: dict[str, tuple[str, set[tuple[str, int]], str]] = {}  # digest -> (path, flops keys, digest)
            try:
                # merged as the parts come back, while the workers read the next ones
                self._merge_read(self._read_in(pool, names, preset, v1, workers) if pool is not None else None,
                                 todo, rules, v1, names)
            except Exception:  # noqa: BLE001 - a worker died, no processes after all: read here
                self._merge_read(None, todo, rules, v1, names)
            if len(todo) < min_distinct:
                return 0
            items = [(digest, path, sorted(keys)) for digest, (path, keys, _) in todo.items()]
            chunk = max(1, min(64, len(items) // (workers * 4)))
            batches = [items[i:i + chunk] for i in range(0, len(items), chunk)]
            if pool is None:
                pool = get_pool(min(workers, len(batches)))
            if pool is None:
                return 0
            try:
                results = list(pool.map(_analyse_batch, batches))
            except Exception:  # noqa: BLE001 - no processes here (daemonic worker, limits): stay lazy
                return 0
        finally:
            if pool is not None and shared is None:
                pool.shutdown()
        for batch in results:
            for digest, analysis in batch:
                _merge(self._arch_by_digest.setdefault(digest, ArchInfo(digest)), analysis)
        return len(items)

    def _merge_read(self, read: Iterator[tuple[str, str | None, Any, int | None]] | None,
                    todo: dict[str, tuple[str, set[tuple[str, int]], str]], rules: str, v1: bool,
                    names: list[str]) -> None:
        """Take what was read of the trials' files (`read`; None: read `names` here now)."""
        if read is None:
            read = iter(self._read_here(names, v1))
        for trial, digest, facts, ks in read:
            if facts is not None:
                self._hparams_facts[trial] = facts
            if digest is None or (v1 and ks is None):
                continue  # the lazy path reports it
            if ks is not None:
                self._kernel_by_trial[trial] = ks
            entry = todo.get(digest)
            if entry is None:  # the first trial with this graph (its digest str is then shared)
                entry = todo[digest] = (os.path.join(self._root, TRIALS, trial, "graph.json"), set(), digest)
            self._digest_by_trial[trial] = entry[2]
            entry[1].add((rules, ks if v1 and ks is not None else DEFAULT_KERNEL_SIZE))

    def _read_here(self, names: list[str], v1: bool) -> list[tuple[str, str | None, Any, int | None]]:
        out: list[tuple[str, str | None, Any, int | None]] = []
        for trial in names:
            try:
                raw = (self.path / TRIALS / trial / "graph.json").read_bytes()
                ks = self.kernel_size(trial) if v1 else None
            except (OSError, RunIOError):
                continue  # the lazy path reports it
            out.append((trial, hashlib.sha256(raw).hexdigest(), None, ks))
        return out

    def _read_in(self, pool: Any, names: list[str], preset: str | None, v1: bool,
                 workers: int) -> Iterator[tuple[str, str | None, Any, int | None]]:
        step = max(256, -(-len(names) // (workers * 8)))
        parts = [names[i:i + step] for i in range(0, len(names), step)]
        k = len(parts)
        results = pool.map(_read_trials, [self._root] * k, parts, [preset] * k, [v1] * k)  # submits them all
        return (x for part in results for x in part)

    @property
    def distinct_architectures(self) -> int:
        return len(self._arch_by_digest)
