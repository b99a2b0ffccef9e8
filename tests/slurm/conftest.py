"""Fixtures of the SLURM tests: they run against real daemons (scripts/slurm-cluster.sh)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm.cluster import require_one_node, start_two_node, stop_two_node


@pytest.fixture
def one_node(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The one-node cluster; SLURM_CONF points at it for the backend in this process."""
    conf = require_one_node()
    monkeypatch.setenv("SLURM_CONF", str(conf))
    return conf


@pytest.fixture(scope="module")
def two_node_cluster() -> Iterator[Path]:
    conf = start_two_node()
    try:
        yield conf
    finally:
        stop_two_node()


@pytest.fixture
def two_node(two_node_cluster: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SLURM_CONF", str(two_node_cluster))
    return two_node_cluster
