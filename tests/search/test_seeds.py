"""Seed architectures: ResNet-50 built in code equals the reference file; the small ResNet is valid."""

from __future__ import annotations

from aiperf_runner.search.morphism import param_count
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.graph import load_graph
from aiperf_runner.spec.seeds import resnet50, seed_for_preset, small_resnet


def test_resnet50_equals_reference_file(reference_resnet50):
    built = resnet50()
    ref = load_graph(str(reference_resnet50))
    assert built.hash() == ref.hash()
    assert built.nodes == ref.nodes and built.layers == ref.layers  # same list order, same node ids


def test_resnet50_v1_compat_test_vector_without_the_file():
    flops = flops_per_image(resnet50(), rules="v1-compat", kernel_size=3)
    assert (flops.eval, flops.train) == (7_806_583_495, 23_053_458_315)
    assert param_count(resnet50()) == 25_557_032  # torchvision's ResNet-50


def test_small_resnet_shape_and_size():
    g = small_resnet()
    g.validate()
    assert g.nodes[g.input_node] == (3, 32, 32) and g.nodes[g.output_node] == (10,)
    assert len(g.layers) == 30
    assert param_count(g) < 100_000
    assert flops_per_image(g).train < 25_000_000  # a few seconds per CPU epoch of 2-4k images
    for blocks in [(1,), (2, 1), (2, 2, 2)]:
        small_resnet(num_classes=7, image_size=16, width=8, blocks=blocks, stem_stride=1).validate()


def test_seed_for_preset():
    assert seed_for_preset("imagenet").hash() == resnet50().hash()
    assert seed_for_preset("smoke", 10, 32).hash() == small_resnet().hash()
    cifar = seed_for_preset("cifar", 100, 32)
    cifar.validate()
    assert cifar.nodes[cifar.output_node] == (100,)
