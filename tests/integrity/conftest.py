"""Fixtures for the integrity tests: a site key, a run directory, its signed copy and bundle."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from aiperf_runner.spec import bundle, keys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.integrity.rundir import make_run


@pytest.fixture(scope="session")
def site_key() -> Ed25519PrivateKey:
    return keys.generate_key()


@pytest.fixture(scope="session")
def other_key() -> Ed25519PrivateKey:
    return keys.generate_key()


@pytest.fixture(scope="session")
def _signed_template(tmp_path_factory: pytest.TempPathFactory, site_key: Ed25519PrivateKey) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("signed")
    run = make_run(base / "run")
    out = bundle.pack(run, base / "run.tar.gz", site_key)
    return run, out


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """An unsigned run directory."""
    return make_run(tmp_path / "run")


@pytest.fixture
def signed_run(tmp_path: Path, _signed_template: tuple[Path, Path]) -> Path:
    """A signed run directory (MANIFEST.json + MANIFEST.sig), a private copy per test."""
    return Path(shutil.copytree(_signed_template[0], tmp_path / "signed"))


@pytest.fixture
def signed_bundle(tmp_path: Path, _signed_template: tuple[Path, Path]) -> Path:
    """The bundle of the signed run, a private copy per test."""
    return Path(shutil.copy(_signed_template[1], tmp_path / "run.tar.gz"))
