"""Architecture descriptors and a vectorised edit distance between them (NNI's kernel distance, fast).

A descriptor, as in NNI's `NetworkDescriptor`, is read off the graph's *main chain* (the longest
input-to-output path):

- `tokens`: the chain's layers that carry structure — conv (filters, kernel, stride), pooling
  (padding, kernel, stride), dense (units), add, concat, global pooling. BN, ReLU, dropout, flatten
  and softmax are left out: they follow every conv and only lengthen the sequences (this is the
  main speed-up over NNI besides vectorisation).
- `skips`: every branch that leaves the chain and comes back, as (start index, end index, kind)
  with indices in the chain's node list and kind 1 = add, 2 = concat.

Distance = edit distance of the token sequences (insert/delete 1; substitute: 1 across types, else
NNI's mean relative attribute difference, except between convs: `_token_cost`) + `skip_weight` x edit distance of the skip lists sorted
by position (insert/delete 1; substitute: NNI's `skip_connection_distance`). NNI matches skip
connections with an assignment (Hungarian); an order-preserving alignment is used here so that both
parts run through the same vectorised dynamic programme.

The dynamic programme runs one row at a time for many candidate/reference pairs at once (numpy over
arrays of shape (candidates, references, length)); within a row the insertion recurrence is a
running minimum: D[i, j] = j + cummin_k<=j (g[k] - k).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aiperf_runner.spec.graph import Graph

_TOKEN_TYPES = ("conv2d", "maxpool2d", "avgpool2d", "dense", "add", "concat", "global_avgpool2d")
_SKIP_KIND = {"add": 1, "concat": 2}

Token = tuple[str, int, int, int]


@dataclass(frozen=True)
class Descriptor:
    tokens: tuple[Token, ...]
    skips: tuple[tuple[int, int, int], ...]


def _token(layer) -> Token:
    p = layer.params
    if layer.type == "conv2d":
        return ("conv2d", int(p["filters"]), int(p["kernel_size"]), int(p["stride"]))
    if layer.type in ("maxpool2d", "avgpool2d"):
        return (layer.type, int(p["padding"]), int(p["kernel_size"]), int(p["stride"]))
    if layer.type == "dense":
        return ("dense", int(p["units"]), 0, 0)
    return (layer.type, 0, 0, 0)


def _topological_order(graph: Graph) -> list[int]:
    producer = {layer.output: i for i, layer in enumerate(graph.layers)}
    consumers: dict[int, list[int]] = {}
    pending = []
    for i, layer in enumerate(graph.layers):
        count = 0
        for n in layer.inputs:
            if n in producer:
                consumers.setdefault(producer[n], []).append(i)
                count += 1
        pending.append(count)
    ready = [i for i, c in enumerate(pending) if c == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for k in consumers.get(i, ()):
            pending[k] -= 1
            if pending[k] == 0:
                ready.append(k)
    if len(order) != len(graph.layers):
        raise ValueError("graph has a cycle")
    return order


def describe(graph: Graph) -> Descriptor:
    """The descriptor of a valid graph."""
    order = _topological_order(graph)
    start = graph.input_node
    depth = {start: 0}
    via: dict[int, tuple[int, int]] = {}  # node -> (layer index, predecessor node) on the longest path
    for i in order:
        layer = graph.layers[i]
        best_in = max(layer.inputs, key=lambda n: depth.get(n, -1))
        depth[layer.output] = depth.get(best_in, -1) + 1
        via[layer.output] = (i, best_in)
    node = graph.output_node
    chain_nodes = [node]
    chain_layers: list[int] = []
    while node in via:
        i, node = via[node]
        chain_layers.append(i)
        chain_nodes.append(node)
    chain_nodes.reverse()
    chain_layers.reverse()
    index = {n: k for k, n in enumerate(chain_nodes)}
    tokens = tuple(_token(graph.layers[i]) for i in chain_layers if graph.layers[i].type in _TOKEN_TYPES)

    consumers: dict[int, list[int]] = {}
    for i, layer in enumerate(graph.layers):
        for n in layer.inputs:
            consumers.setdefault(n, []).append(i)
    on_chain = set(chain_layers)
    skips = []
    for u in chain_nodes:
        for li in consumers.get(u, ()):
            if li in on_chain:
                layer = graph.layers[li]
                # a chain layer reading u beside its chain input (add(x, u) with u earlier on the chain)
                if via[layer.output][1] != u:
                    skips.append((index[u], index[layer.output], _SKIP_KIND.get(layer.type, 0)))
                continue
            cur_layer = li
            for _ in range(len(graph.layers)):
                out = graph.layers[cur_layer].output
                if out in index:
                    skips.append((index[u], index[out], _SKIP_KIND.get(graph.layers[cur_layer].type, 0)))
                    break
                nxt = consumers.get(out)
                if not nxt:
                    break
                cur_layer = min(nxt)
    return Descriptor(tokens, tuple(sorted(skips)))


_CONV = float(_TOKEN_TYPES.index("conv2d"))


def _token_cost(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NNI's layer_distance between token features (kind, x, y, z): 1 across kinds, else the mean
    relative difference |x - x'| / max(x, x') of the three attributes — except between convs.

    Between convs NNI's cost made a doubling of the filters 1/6 of an inserted conv, so a *wider*
    child (1-4 chain convs doubled) sat 0.17-0.67 from its parent against 1 for *deeper* and *skip*:
    the GP was always surer of it (posterior std 0.004 against 0.011-0.014 on a smoke run) and UCB
    never chose one (0 of 30 proposals). Here filters differ by |log2(f / f')| (at most 1) and a
    conv's cost is its largest attribute difference: doubling a conv is as far as inserting one."""
    x, y = a[:, None, 1:], b[None, :, 1:]
    m = np.maximum(x, y)
    rel = np.where(m > 0, np.abs(x - y) / np.where(m > 0, m, 1), 0.0)
    mean = rel.mean(axis=2)
    fx, fy = x[..., 0], y[..., 0]
    octaves = np.minimum(1.0, np.abs(np.log2(np.where(fx > 0, fx, 1.0) / np.where(fy > 0, fy, 1.0))))
    conv = np.maximum(octaves, rel[..., 1:].max(axis=2))
    both_conv = (a[:, None, 0] == _CONV) & (b[None, :, 0] == _CONV)
    return np.where(a[:, None, 0] != b[None, :, 0], 1.0, np.where(both_conv, conv, mean))


def _skip_cost(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NNI's skip_connection_distance between skips (start, end, kind)."""
    a_start, b_start = a[:, None, 0], b[None, :, 0]
    a_len, b_len = np.abs(a[:, None, 1] - a[:, None, 0]), np.abs(b[None, :, 1] - b[None, :, 0])
    num = np.abs(a_start - b_start) + np.abs(a_len - b_len)
    den = np.maximum(a_start, b_start) + np.maximum(a_len, b_len)
    val = np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)
    return np.where(a[:, None, 2] != b[None, :, 2], 1.0, val)


class Vocabulary:
    """Item (token or skip connection) <-> id, with the substitution cost between all known items,
    grown incrementally as items appear."""

    def __init__(self, cost_fn=_token_cost, featurise=None) -> None:
        self.ids: dict[tuple, int] = {}
        self.items: list[tuple] = []
        self._cost_fn = cost_fn
        self._featurise = featurise or _same  # a module function: a bank pickles (the search's process)
        self._features = np.zeros((0, 0))
        self._cost = np.zeros((0, 0), dtype=np.float32)

    def encode(self, items: Sequence[tuple]) -> np.ndarray:
        out = np.empty(len(items), dtype=np.int32)
        for k, item in enumerate(items):
            i = self.ids.get(item)
            if i is None:
                i = self.ids[item] = len(self.items)
                self.items.append(item)
            out[k] = i
        return out

    @property
    def cost(self) -> np.ndarray:
        t, old = len(self.items), len(self._cost)
        if t > old:
            new = np.array([self._featurise(x) for x in self.items[old:]], dtype=np.float64)
            feats = new if old == 0 else np.concatenate([self._features, new])
            grown = np.empty((t, t), dtype=np.float32)
            grown[:old, :old] = self._cost
            block = self._cost_fn(new, feats).astype(np.float32)  # (t - old, t)
            grown[old:, :] = block
            grown[:old, old:] = block[:, :old].T
            self._features, self._cost = feats, grown
        return self._cost


def _same(item: tuple) -> tuple:
    return item


def _token_features(tok: Token) -> tuple[float, ...]:
    return (float(_TOKEN_TYPES.index(tok[0])), *map(float, tok[1:]))


def _dp(lb_max: int, rows: int, lengths_a: np.ndarray, lengths_b: np.ndarray, shape: tuple[int, int],
        cost_row) -> np.ndarray:
    """Edit distance D[la, lb] for every (candidate, reference) pair.

    Arrays are laid out (reference position j, pair) so that the running minimum along j runs over
    contiguous pair vectors. cost_row(i) -> (lb_max, m * n) costs of substituting candidate element
    i (for each candidate) with reference element j (for each reference)."""
    m, n = shape
    pairs = m * n
    j = np.arange(lb_max + 1, dtype=np.float32)[:, None]
    prev = np.repeat(j, pairs, axis=1)
    row = np.empty_like(prev)
    tmp = np.empty((lb_max, pairs), dtype=np.float32)
    out = np.empty((m, n), dtype=np.float32)
    cols = np.arange(n)
    done = lengths_a == 0
    if done.any():
        out[done] = lengths_b[None, :].astype(np.float32)
    for i in range(1, rows + 1):
        row[0] = prev[0] + 1
        if lb_max:
            np.add(prev[:-1], cost_row(i - 1), out=tmp)
            np.add(prev[1:], 1, out=row[1:])
            np.minimum(row[1:], tmp, out=row[1:])
            row -= j
            if pairs < 256:
                np.minimum.accumulate(row, axis=0, out=row)
            else:  # row by row: for wide rows 4-15x faster than minimum.accumulate(axis=0)
                for k in range(1, lb_max + 1):
                    np.minimum(row[k - 1], row[k], out=row[k])
            row += j
        prev, row = row, prev
        done = np.flatnonzero(lengths_a == i)
        if done.size:
            full = prev.reshape(lb_max + 1, m, n)
            out[done] = full[lengths_b[None, :], done[:, None], cols[None, :]]
    return out


class DescriptorBank:
    """Encoded descriptors of the reference architectures, padded into arrays, growable."""

    def __init__(self) -> None:
        self.vocab = Vocabulary(_token_cost, _token_features)
        self.skip_vocab = Vocabulary(_skip_cost)
        self.n = 0
        self._seqs = {"tok": np.zeros((16, 8), dtype=np.int32), "skip": np.zeros((16, 4), dtype=np.int32)}
        self._lens = {"tok": np.zeros(16, dtype=np.int64), "skip": np.zeros(16, dtype=np.int64)}
        self._max = {"tok": 0, "skip": 0}

    def _encode(self, descs: Sequence[Descriptor], kind: str) -> tuple[np.ndarray, np.ndarray]:
        vocab = self.vocab if kind == "tok" else self.skip_vocab
        ids = [vocab.encode(d.tokens if kind == "tok" else d.skips) for d in descs]
        lengths = np.array([len(x) for x in ids], dtype=np.int64)
        seqs = np.zeros((len(descs), max(1, int(lengths.max(initial=0)))), dtype=np.int32)
        for k, x in enumerate(ids):
            seqs[k, :len(x)] = x
        return seqs, lengths

    def add(self, desc: Descriptor) -> int:
        i = self.put(self.n, desc)
        self.n += 1
        return i

    def put(self, i: int, desc: Descriptor) -> int:
        """Store `desc` as reference `i` (an existing one is replaced; i == n appends without
        counting it: `add` does that)."""
        for kind in ("tok", "skip"):
            seq, length = self._encode([desc], kind)
            arr, lens = self._seqs[kind], self._lens[kind]
            if i == len(lens):
                arr = np.concatenate([arr, np.zeros_like(arr)])
                lens = np.concatenate([lens, np.zeros_like(lens)])
            if length[0] > arr.shape[1]:
                wider = np.zeros((len(arr), max(int(length[0]), 2 * arr.shape[1])), dtype=np.int32)
                wider[:, :arr.shape[1]] = arr
                arr = wider
            arr[i] = 0
            arr[i, :length[0]] = seq[0, :length[0]]
            lens[i] = length[0]
            self._seqs[kind], self._lens[kind] = arr, lens
            self._max[kind] = max(self._max[kind], int(length[0]))
        return i

    def distances(self, descs: Sequence[Descriptor], skip_weight: float = 1.0) -> np.ndarray:
        """(len(descs), n) distances from each descriptor to every reference."""
        m, n = len(descs), self.n
        if m == 0 or n == 0:
            return np.zeros((m, n), dtype=np.float32)
        out = self._distance(descs, "tok")
        if skip_weight:
            out += np.float32(skip_weight) * self._distance(descs, "skip")
        return out

    def _distance(self, descs: Sequence[Descriptor], kind: str) -> np.ndarray:
        seqs, lengths = self._encode(descs, kind)
        cost = (self.vocab if kind == "tok" else self.skip_vocab).cost
        m, n, lb = len(descs), self.n, self._max[kind]
        if lb == 0 or int(lengths.max()) == 0:  # one side empty everywhere: insertions only
            return np.broadcast_to((lengths[:, None] + self._lens[kind][None, :n]).astype(np.float32), (m, n)).copy()
        bank = self._seqs[kind][:n, :lb].T  # (Lb, n)
        used, inverse = np.unique(seqs, return_inverse=True)
        inverse = inverse.reshape(seqs.shape)
        table = np.ascontiguousarray(cost[used][:, bank].transpose(1, 0, 2))  # (Lb, used, n)

        def cost_row(i: int) -> np.ndarray:
            return np.take(table, inverse[:, i], axis=1).reshape(lb, m * n)

        return _dp(lb, int(lengths.max()), lengths, self._lens[kind][:n], (m, n), cost_row)


def edit_distance(a: Descriptor, b: Descriptor, skip_weight: float = 1.0) -> float:
    """Distance between two descriptors (reference implementation of the bank's vectorised one)."""
    bank = DescriptorBank()
    bank.add(b)
    return float(bank.distances([a], skip_weight)[0, 0])
