"""Seed architectures the search starts from, built in code (no file needed at run time), and the
bounds the search keeps its proposals within: part of the benchmark's definition, so the verifier
checks every trial's graph against them (spec/bound.py, `integrity.bound`).

- `resnet50()`: the official AIPerf seed. Layer for layer (types, parameters, list order and node
  numbering) the graph of `tests/data/reference_resnet50.json`, so its `Graph.hash()` equals that of
  the reference file read with `load_graph` and its v1-compat FLOPs are the published test vector.
- `small_resnet()`: a small ResNet for the `smoke`, `fashion-mnist` and `cifar` presets (conv-BN-ReLU
  stem, basic residual blocks in three stages, global average pooling, dense).

Graphs are torch-free `spec.graph.Graph`s; shapes are channels-first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import presetfacts
from .flops import flops_per_image
from .graph import Graph


def _conv(g: Graph, x: int, filters: int, kernel: int, stride: int = 1, padding: int | None = None) -> int:
    if padding is None:
        padding = kernel // 2
    return g.add_layer("conv2d", [x], in_channels=g.nodes[x][0], filters=filters, kernel_size=kernel,
                       stride=stride, padding=padding)


def _bn(g: Graph, x: int) -> int:
    return g.add_layer("batchnorm2d", [x], num_features=g.nodes[x][0])


def _relu(g: Graph, x: int) -> int:
    return g.add_layer("relu", [x])


def resnet50(num_classes: int = 1000, image_size: int = 224, in_channels: int = 3) -> Graph:
    """ResNet-50 exactly as the original AIPerf seed (Keras-style v1: stride on the first 1x1 conv).

    Layer order per block follows the reference file: conv-BN-ReLU, conv-BN-ReLU, conv, [shortcut conv],
    BN, [shortcut BN], add, ReLU.
    """
    g = Graph([(in_channels, image_size, image_size)], [])
    x = _relu(g, _bn(g, _conv(g, 0, 64, 7, 2, 3)))
    x = g.add_layer("maxpool2d", [x], kernel_size=3, stride=2, padding=1)
    for stage, (width, n_blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3), strict=True)):
        for block in range(n_blocks):
            stride = 2 if (block == 0 and stage > 0) else 1
            y = _relu(g, _bn(g, _conv(g, x, width, 1, stride, 0)))
            y = _relu(g, _bn(g, _conv(g, y, width, 3, 1, 1)))
            y = _conv(g, y, width * 4, 1, 1, 0)
            if block == 0:
                s = _conv(g, x, width * 4, 1, stride, 0)
                y = _bn(g, y)
                s = _bn(g, s)
                x = _relu(g, g.add_layer("add", [y, s]))
            else:
                y = _bn(g, y)
                x = _relu(g, g.add_layer("add", [y, x]))
    x = g.add_layer("global_avgpool2d", [x])
    g.add_layer("dense", [x], in_units=g.nodes[x][0], units=num_classes)
    return g


def small_resnet(num_classes: int = 10, image_size: int = 32, width: int = 16,
                 blocks: Sequence[int] = (1, 1, 1), in_channels: int = 3, stem_stride: int = 2) -> Graph:
    """A small ResNet: conv3x3-BN-ReLU stem (stride `stem_stride`), stages of basic blocks (width,
    2x, 4x; the stages after the first halve the spatial size), global average pooling, dense.

    Basic block: conv3x3-BN-ReLU-conv3x3-BN, + shortcut (identity, or 1x1 conv (stride) + BN when the
    shape changes), add, ReLU. With the defaults at 32x32: 30 layers, 78 k parameters, 6.4 M FLOP/image
    forward and 18.9 M train (v2). On one CPU core it trains 2,000 smoke images per epoch in about
    2-3 s and reaches above 0.9 validation accuracy in 4-5 epochs (batch 32, lr 0.05, cosine).
    """
    if image_size < 4 * stem_stride:
        raise ValueError(f"image_size {image_size} too small for a small ResNet")
    g = Graph([(in_channels, image_size, image_size)], [])
    x = _relu(g, _bn(g, _conv(g, 0, width, 3, stem_stride, 1)))
    for stage, n_blocks in enumerate(blocks):
        filters = width * 2 ** stage
        for block in range(n_blocks):
            stride = 2 if (block == 0 and stage > 0) else 1
            y = _relu(g, _bn(g, _conv(g, x, filters, 3, stride, 1)))
            y = _bn(g, _conv(g, y, filters, 3, 1, 1))
            if stride != 1 or g.nodes[x][0] != filters:
                s = _bn(g, _conv(g, x, filters, 1, stride, 0))
            else:
                s = x
            x = _relu(g, g.add_layer("add", [y, s]))
    x = g.add_layer("global_avgpool2d", [x])
    g.add_layer("dense", [x], in_units=g.nodes[x][0], units=num_classes)
    return g


def seed_for_preset(preset: str, num_classes: int | None = None, image_size: int | None = None) -> Graph:
    """The seed architecture of a preset: ResNet-50 for `imagenet`, the small ResNet otherwise."""
    if preset == "imagenet":
        return resnet50(num_classes or 1000, image_size or 224)
    if preset == "fashion-mnist":
        # 1x28x28: a stride-2 stem, then 14x14x16, 7x7x32, 4x4x64 (78 k parameters, 15.5 M train
        # FLOP/image): about 4,500 images/s on one CPU core, so a 60,000-image epoch takes ~14 s.
        # Small on purpose: after 15 epochs it stops near 0.918, and the morphisms' wider and deeper
        # children are what passes 0.92. A stride-1 stem with 2x2 max pooling learned no better in
        # 12 epochs (0.916) and trained 50 % slower.
        return small_resnet(num_classes or 10, image_size or 28, width=16, blocks=(1, 1, 1), in_channels=1,
                            stem_stride=2)
    if preset == "cifar":
        return small_resnet(num_classes or 10, image_size or 32, width=16, blocks=(2, 2, 2), stem_stride=1)
    return small_resnet(num_classes or 10, image_size or 32)


def search_bounds(preset: Any, seed_graph: Graph) -> dict[str, int | None]:
    """The preset's bounds on a proposal, as keyword arguments of the searches: `max_train_flops`
    (v2 train FLOPs per image) and `max_layers`, the seed's times the preset's ratios
    (spec/presetfacts.py; None where it sets none). `preset`: its name, or anything with a `name`."""
    facts = presetfacts.get(preset if isinstance(preset, str) else getattr(preset, "name", None))
    # A preset object's own ratios where it has them (bench/search_spread.py tries others).
    flops_ratio = getattr(preset, "max_flops_ratio", facts.max_flops_ratio if facts is not None else None)
    layers_ratio = getattr(preset, "max_layers_ratio", facts.max_layers_ratio if facts is not None else None)
    return {"max_train_flops": None if not flops_ratio else int(flops_ratio * flops_per_image(seed_graph, "v2").train),
            "max_layers": None if not layers_ratio else int(layers_ratio * len(seed_graph.layers))}


def within_bounds(graph: Graph, max_train_flops: int | None = None, max_layers: int | None = None) -> bool:
    """Whether a proposal respects the bounds `search_bounds` gives (the cheap layer count first)."""
    if max_layers is not None and len(graph.layers) > max_layers:
        return False
    return max_train_flops is None or flops_per_image(graph, "v2").train <= max_train_flops
