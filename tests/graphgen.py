"""Seeded random generator of valid architecture graphs, for tests (FLOPs, builder, search, training).

`random_graph(seed)` returns a validated `Graph` with small spatial sizes (inputs 6..16 pixels,
possibly non-square) so torch runs it fast. Across seeds it covers every layer type:

- conv2d with kernel 1/2/3/5/7, stride 1/2/3, padding 0..K//2; dense; batchnorm2d; relu;
  maxpool2d / avgpool2d with padding; global_avgpool2d; add; concat (2 or 3 inputs); dropout on
  images and on flat tensors; flatten; softmax (at the output, and occasionally inside the head);
- convs whose input needs no gradient although they are not the first layer (input -> pool -> conv,
  or two convs reading the input);
- the shapes the three morphisms make (applied like the original does: new layers and nodes are
  appended at the end of the lists, so list order is not topological order):
  *deeper* (conv3x3-BN-ReLU inserted after a ReLU), *wider* (a conv's filters doubled, the
  following BN and convs' in_channels adjusted), *skip* (add-connection from a ReLU to a later BN
  through a 1x1 (strided) conv + BN);
- some graphs get their layer list shuffled (any order must work: shapes, builder, v2 FLOPs).

`random_graphs(n, seed=0)` yields n graphs from seeds derived from `seed`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from aiperf_runner.spec.graph import Graph, GraphError, Layer

__all__ = ["random_graph", "random_graphs", "deeper", "wider", "skip", "small_resnet"]


# ---- base graphs ------------------------------------------------------------------------------

def _try(g: Graph, t: str, inputs: list[int], **params: object) -> int | None:
    """Append a layer if its shape works out; return its output node or None (graph unchanged)."""
    try:
        return g.add_layer(t, inputs, **params)
    except GraphError:
        return None


def _conv_bn_relu(g: Graph, rng: random.Random, x: int, filters: int, k: int | None = None,
                  stride: int | None = None) -> int:
    c, h, w = g.nodes[x]
    for _ in range(20):
        kk = k if k is not None else rng.choice([1, 2, 3, 3, 3, 5])
        ss = stride if stride is not None else rng.choice([1, 1, 1, 2])
        pp = rng.randint(0, kk // 2) if kk > 1 else 0
        if kk > min(h, w) + 2 * pp:
            continue
        y = _try(g, "conv2d", [x], in_channels=c, filters=filters, kernel_size=kk, stride=ss, padding=pp)
        if y is not None:
            break
    else:
        y = g.add_layer("conv2d", [x], in_channels=c, filters=filters, kernel_size=1, stride=1, padding=0)
    y = g.add_layer("batchnorm2d", [y], num_features=filters)
    return g.add_layer("relu", [y])


def _residual(g: Graph, rng: random.Random, x: int, filters: int) -> int:
    """ResNet basic block; a projection (1x1 strided conv + BN) when the shape changes."""
    c, h, w = g.nodes[x]
    stride = 2 if min(h, w) >= 4 and rng.random() < 0.4 else 1
    y = g.add_layer("conv2d", [x], in_channels=c, filters=filters, kernel_size=3, stride=stride, padding=1)
    y = g.add_layer("batchnorm2d", [y], num_features=filters)
    y = g.add_layer("relu", [y])
    y = g.add_layer("conv2d", [y], in_channels=filters, filters=filters, kernel_size=3, stride=1, padding=1)
    y = g.add_layer("batchnorm2d", [y], num_features=filters)
    if stride != 1 or filters != c:
        s = g.add_layer("conv2d", [x], in_channels=c, filters=filters, kernel_size=1, stride=stride, padding=0)
        s = g.add_layer("batchnorm2d", [s], num_features=filters)
    else:
        s = x
    y = g.add_layer("add", [y, s] if rng.random() < 0.5 else [s, y])
    return g.add_layer("relu", [y])


def _concat_block(g: Graph, rng: random.Random, x: int) -> int:
    """2 or 3 branches with different kernels and the same output size, concatenated."""
    c, h, w = g.nodes[x]
    branches = []
    for k in rng.sample([1, 3, 5], rng.choice([2, 3])):
        if k > min(h, w) + 2 * (k // 2):
            continue
        f = rng.choice([2, 3, 4, 6])
        b = g.add_layer("conv2d", [x], in_channels=c, filters=f, kernel_size=k, stride=1, padding=k // 2)
        if rng.random() < 0.5:
            b = g.add_layer("relu", [b])
        branches.append(b)
    if len(branches) < 2:
        pool = g.add_layer("maxpool2d", [x], kernel_size=3 if min(h, w) >= 3 else 1, stride=1,
                           padding=1 if min(h, w) >= 3 else 0)
        branches.append(pool)
        if len(branches) < 2:
            branches.append(x)
    y = g.add_layer("concat", branches)
    return g.add_layer("batchnorm2d", [y], num_features=g.nodes[y][0])


def _pool(g: Graph, rng: random.Random, x: int) -> int:
    c, h, w = g.nodes[x]
    for _ in range(10):
        t = rng.choice(["maxpool2d", "avgpool2d"])
        k = rng.choice([1, 2, 3])
        s = rng.choice([1, 2, 2, k])
        p = rng.randint(0, k // 2)
        y = _try(g, t, [x], kernel_size=k, stride=s, padding=p)
        if y is not None:
            return y
    return x


def random_graph(seed: int, morphisms: int | None = None) -> Graph:
    """A validated random graph; `morphisms` (default: random 0..4) deeper/wider/skip edits applied."""
    rng = random.Random(seed)
    c0 = rng.choice([1, 3, 3])
    h0 = rng.randint(6, 16)
    w0 = h0 if rng.random() < 0.6 else rng.randint(6, 16)
    g = Graph([(c0, h0, w0)], [])
    x = 0
    # stem, sometimes starting with a layer that leaves the first conv without an input gradient
    r = rng.random()
    if r < 0.15:
        x = _pool(g, rng, x)
    elif r < 0.25:
        x = g.add_layer("batchnorm2d", [x], num_features=c0)  # BN has parameters: the conv after it gets an input grad
    elif r < 0.35:
        x = g.add_layer("relu", [x])
    if rng.random() < 0.15:  # two convs read the input directly, concatenated
        a = g.add_layer("conv2d", [x], in_channels=c0, filters=rng.choice([2, 4]), kernel_size=3, stride=1, padding=1)
        b = g.add_layer("conv2d", [x], in_channels=c0, filters=rng.choice([2, 4]), kernel_size=1, stride=1, padding=0)
        x = g.add_layer("concat", [a, b])
        x = g.add_layer("relu", [x])
    else:
        x = _conv_bn_relu(g, rng, x, rng.choice([4, 6, 8]), k=rng.choice([1, 3, 5, 7]), stride=rng.choice([1, 1, 2]))
    for _ in range(rng.randint(1, 5)):
        c = g.nodes[x][0]
        kind = rng.choices(["cbr", "res", "concat", "pool", "dropout", "relu"], [4, 3, 2, 2, 1, 1])[0]
        if kind == "cbr":
            x = _conv_bn_relu(g, rng, x, rng.choice([c, 2 * c, max(2, c // 2)]))
        elif kind == "res":
            x = _residual(g, rng, x, rng.choice([c, c, 2 * c]))
        elif kind == "concat":
            x = _concat_block(g, rng, x)
        elif kind == "pool":
            x = _pool(g, rng, x)
        elif kind == "dropout":
            x = g.add_layer("dropout", [x], rate=rng.choice([0.0, 0.1, 0.25]))
        else:
            x = g.add_layer("relu", [x])
    # head
    classes = rng.choice([2, 5, 10])
    if rng.random() < 0.7:
        x = g.add_layer("global_avgpool2d", [x])
    else:
        x = g.add_layer("flatten", [x])
    if rng.random() < 0.3:
        hidden = rng.choice([8, 16])
        x = g.add_layer("dense", [x], in_units=g.nodes[x][0], units=hidden)
        x = g.add_layer("relu", [x]) if rng.random() < 0.7 else g.add_layer("softmax", [x])
    if rng.random() < 0.3:
        x = g.add_layer("dropout", [x], rate=0.5)
    x = g.add_layer("dense", [x], in_units=g.nodes[x][0], units=classes)
    if rng.random() < 0.4:
        x = g.add_layer("softmax", [x])
    g.validate()
    # morphisms, appended at the end of the lists like the original
    n_morph = rng.randint(0, 4) if morphisms is None else morphisms
    for _ in range(n_morph):
        op = rng.choice([deeper, wider, skip])
        g = op(g, rng) or g
    if rng.random() < 0.2:
        order = list(range(len(g.layers)))
        rng.shuffle(order)
        g = Graph(list(g.nodes), [g.layers[i] for i in order])
    g.validate()
    return g


def random_graphs(n: int, seed: int = 0) -> Iterator[Graph]:
    for i in range(n):
        yield random_graph(seed * 1_000_003 + i)


def small_resnet(input_shape: tuple[int, int, int] = (3, 16, 16), classes: int = 10,
                 widths: tuple[int, ...] = (8, 16)) -> Graph:
    """A small deterministic ResNet (conv-BN-ReLU stem, basic blocks, global pool, dense)."""
    rng = random.Random(0)
    g = Graph([tuple(input_shape)], [])
    x = g.add_layer("conv2d", [0], in_channels=input_shape[0], filters=widths[0], kernel_size=3, stride=1, padding=1)
    x = g.add_layer("batchnorm2d", [x], num_features=widths[0])
    x = g.add_layer("relu", [x])
    for w in widths:
        x = _residual(g, rng, x, w)
    x = g.add_layer("global_avgpool2d", [x])
    g.add_layer("dense", [x], in_units=widths[-1], units=classes)
    g.validate()
    return g


# ---- morphism-shaped edits (test-local; the real ones live in aiperf_runner.search.morphism) ----

def _rewire(g: Graph, old: int, new: int, skip_layers: set[int]) -> None:
    """Make every layer reading `old` (except `skip_layers`) read `new` instead."""
    for i, layer in enumerate(g.layers):
        if i in skip_layers or old not in layer.inputs:
            continue
        g.layers[i] = Layer(layer.type, tuple(new if n == old else n for n in layer.inputs), layer.output,
                            dict(layer.params))


def deeper(g: Graph, rng: random.Random) -> Graph | None:
    """Insert conv3x3-BN-ReLU after a ReLU on an image tensor."""
    relus = [x for x in g.layers if x.type == "relu" and len(g.nodes[x.output]) == 3]
    if not relus:
        return None
    g = g.copy()
    r = rng.choice(relus).output
    c = g.nodes[r][0]
    first = len(g.layers)
    y = g.add_layer("conv2d", [r], in_channels=c, filters=c, kernel_size=3, stride=1, padding=1)
    y = g.add_layer("batchnorm2d", [y], num_features=c)
    y = g.add_layer("relu", [y])
    _rewire(g, r, y, {first})
    g.validate()
    return g


def wider(g: Graph, rng: random.Random) -> Graph | None:
    """Double a conv's filters; adjust the BN/ReLU/pool/dropout chain after it and the next convs."""
    convs = [i for i, x in enumerate(g.layers) if x.type == "conv2d"]
    rng.shuffle(convs)
    consumers = g.consumers()
    for ci in convs:
        h = g.copy()
        conv = h.layers[ci]
        old = int(conv.params["filters"])
        new = 2 * old
        h.layers[ci] = Layer("conv2d", conv.inputs, conv.output, {**conv.params, "filters": new})
        frontier = [conv.output]
        ok = True
        while frontier and ok:
            node = frontier.pop()
            h.nodes[node] = (new, *h.nodes[node][1:])
            for j in consumers.get(node, []):
                layer = h.layers[j]
                if layer.type == "conv2d":
                    h.layers[j] = Layer("conv2d", layer.inputs, layer.output, {**layer.params, "in_channels": new})
                elif layer.type == "batchnorm2d":
                    h.layers[j] = Layer("batchnorm2d", layer.inputs, layer.output, {"num_features": new})
                    frontier.append(layer.output)
                elif layer.type in ("relu", "maxpool2d", "avgpool2d", "dropout"):
                    frontier.append(layer.output)
                else:  # add / concat / dense / flatten / global pool: not a simple widening
                    ok = False
                    break
        if ok:
            try:
                h.validate()
            except GraphError:
                continue
            return h
    return None


def _ancestors(g: Graph, node: int) -> set[int]:
    producer = g.producer()
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in producer:
            stack.extend(g.layers[producer[n]].inputs)
    return seen


def skip(g: Graph, rng: random.Random) -> Graph | None:
    """Add-connection from a ReLU's output to a later BN's output through 1x1 (strided) conv + BN."""
    relus = [x.output for x in g.layers if x.type == "relu" and len(g.nodes[x.output]) == 3]
    bns = [i for i, x in enumerate(g.layers) if x.type == "batchnorm2d"]
    pairs = []
    for bi in bns:
        b = g.layers[bi].output
        anc = _ancestors(g, b)
        cb, hb, wb = g.nodes[b]
        for r in relus:
            if r not in anc or r == b:
                continue
            cr, hr, wr = g.nodes[r]
            for s in (1, 2, 3, 4):
                if (hr - 1) // s + 1 == hb and (wr - 1) // s + 1 == wb:
                    pairs.append((r, bi, s))
                    break
    if not pairs:
        return None
    r, bi, s = rng.choice(pairs)
    g = g.copy()
    b = g.layers[bi].output
    old_consumers = {j for j, x in enumerate(g.layers) if b in x.inputs}
    y = g.add_layer("conv2d", [r], in_channels=g.nodes[r][0], filters=g.nodes[b][0], kernel_size=1,
                    stride=s, padding=0)
    y = g.add_layer("batchnorm2d", [y], num_features=g.nodes[b][0])
    add_index = len(g.layers)
    a = g.add_layer("add", [b, y])
    _rewire(g, b, a, {add_index} | (set(range(len(g.layers))) - old_consumers))
    g.validate()
    return g
