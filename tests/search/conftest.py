"""Fixtures of the search tests: seed graphs and a deterministic random generator."""

from __future__ import annotations

import random

import pytest
from aiperf_runner.spec.seeds import small_resnet


@pytest.fixture
def seed_graph():
    return small_resnet()


@pytest.fixture
def rng():
    return random.Random(1234)
