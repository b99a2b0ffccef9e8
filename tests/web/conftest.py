"""Fixtures of the web tests: the site's URLconf and generated demo results."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def site_urls(settings):
    settings.ROOT_URLCONF = "tests.web.urls"


@pytest.fixture(autouse=True)
def fresh_page_cache() -> None:
    """Each test's pages are rendered from its own database: none cached by an earlier test is read."""
    from leaderboard import listcache

    listcache.new_generation()


@pytest.fixture
def demo_data():
    """demo_data(n, seed=1, llm_results=0) -> Summary: replace the demo data with n generated results and
    `llm_results` AIPerf-LLM ones (None: a tenth as many, as `manage.py aiperf_demo_data` makes); none by default:
    the image list's tests hold the list to every result there is."""
    from devdata import demo

    def make(n: int, seed: int = 1, llm_results: int | None = 0):
        return demo.generate(n, seed=seed, llm_results=llm_results)

    return make


@pytest.fixture
def real_result(transactional_db, settings, tmp_path):
    """A result verified for real: a synthetic run signed, uploaded through the API and verified in-process.

    Returns (Result, bundle bytes)."""
    from aiperf_runner.spec import bundle

    from devdata.runfactory import make_run
    from leaderboard.models import Result
    from tests.service.conftest import new_site, upload

    settings.MEDIA_ROOT = tmp_path / "media"
    settings.AIPERF_REQUIRE_APPROVAL = False
    site = new_site("Real Site", "DE")
    run = tmp_path / "run"
    make_run(run, slots=2, trials=5, epochs=3, seed=7)
    path = bundle.pack(run, tmp_path / "run.tar.gz", site.key)
    resp = upload(site.client, path)
    assert resp.status_code == 201, resp.content
    result = Result.objects.get(pk=resp.json()["result"])
    return result, path.read_bytes()
