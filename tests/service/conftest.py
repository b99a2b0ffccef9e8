"""Fixtures of the service tests: sites with tokens and keys, signed bundles from devdata/runfactory.py.

The default tests run on SQLite with Celery tasks in-process (the embedded mode); the files named
test_e2e_* run the service on PostgreSQL, Redis and a real Celery worker in subprocesses.
"""

from __future__ import annotations

import io
import itertools
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiperf_runner.spec import bundle, keys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rest_framework.test import APIClient

from devdata.runfactory import make_run

_seq = itertools.count()


@dataclass
class SiteFixture:
    site: object
    token: str
    key: Ed25519PrivateKey
    client: APIClient

    @property
    def fingerprint(self) -> str:
        return keys.fingerprint(self.key)


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path: Path) -> Path:
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.AIPERF_LOG_KEY_FILE = tmp_path / "log_key.pem"
    settings.AIPERF_REQUIRE_APPROVAL = False
    return settings.MEDIA_ROOT


@pytest.fixture(autouse=True)
def fresh_page_cache() -> None:
    """Each test's pages are rendered from its own database: none cached by an earlier test is read."""
    from leaderboard import listcache

    listcache.new_generation()


def new_site(name: str, country: str = "CN", register_key: bool = True) -> SiteFixture:
    from leaderboard.models import Site, SiteKey

    site = Site(name=name, country=country)
    token = site.new_token()
    site.save()
    key = keys.generate_key()
    if register_key:
        SiteKey.objects.create(site=site, public_key=keys.public_b64(key), fingerprint=keys.fingerprint(key))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return SiteFixture(site, token, key, client)


@pytest.fixture
def site_a(transactional_db) -> SiteFixture:
    return new_site("Site A", "CN")


@pytest.fixture
def site_b(transactional_db) -> SiteFixture:
    return new_site("Site B", "US")


@pytest.fixture
def run_dir(tmp_path: Path):
    """make a synthetic run directory: run_dir(**make_run kwargs) -> Path."""

    def make(**kwargs) -> Path:
        path = tmp_path / f"run{next(_seq)}"
        kwargs.setdefault("seed", next(_seq))
        make_run(path, **kwargs)
        return path

    return make


@pytest.fixture
def make_bundle(tmp_path: Path, run_dir):
    """sign and pack a synthetic run: make_bundle(key, path=None, **make_run kwargs) -> bundle Path."""

    def make(key: Ed25519PrivateKey, path: Path | None = None, **kwargs) -> Path:
        path = path or run_dir(**kwargs)
        return bundle.pack(path, tmp_path / f"{path.name}-{next(_seq)}.tar.gz", key)

    return make


def upload(client: APIClient, path: Path | bytes, name: str = "bundle.tar.gz"):
    data = path if isinstance(path, bytes) else Path(path).read_bytes()
    fh = io.BytesIO(data)
    fh.name = name
    return client.post("/api/v1/submissions/", {"bundle": fh}, format="multipart")


def tar_with(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def nothing_left(media_root: Path) -> list[str]:
    """Files under MEDIA_ROOT (temporary directories excluded if empty)."""
    if not media_root.exists():
        return []
    return sorted(str(p.relative_to(media_root)) for p in media_root.rglob("*") if p.is_file())
