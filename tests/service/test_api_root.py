"""The API root links every endpoint a reader can GET (each answers a GET) and names, apart, the ones that only
take a site's writes with their method: none of its read links answers 405."""

from __future__ import annotations

from rest_framework.test import APIClient


def test_the_root_links_every_read_and_names_the_writes(db):
    client = APIClient()
    root = client.get("/api/v1/", HTTP_ACCEPT="application/json").json()
    writes = root.pop("writes")
    assert {"leaderboard", "results", "systems", "submissions", "witness", "log_head", "schema", "docs"} <= set(root)
    for name, url in root.items():
        path = url.removeprefix("http://testserver")
        status = client.get(path).status_code
        # The log's entries and consistency proof need their bounds: a 400 that says so, not a 405.
        assert status == (400 if name in ("log_entries", "log_consistency") else 200), (name, path, status)
    assert {"submissions", "uploads", "runs"} <= set(writes)
    for name, write in writes.items():
        assert write["method"].startswith("POST"), (name, write)
        assert client.get(write["url"].removeprefix("http://testserver")).status_code != 404, name


def test_site_filters_take_a_name_everywhere(db):
    from tests.service.conftest import new_site

    a, b = new_site("Filter Lab A"), new_site("Filter Lab B")
    client = APIClient()
    for path in ("/api/v1/keys/", "/api/v1/systems/", "/api/v1/submissions/", "/api/v1/leaderboard/"):
        assert client.get(path, {"site": "no such site"}).json()["count"] == 0, path
    keys = client.get("/api/v1/keys/", {"site": "filter lab a"}).json()["results"]
    assert keys and {k["site"]["name"] for k in keys} == {"Filter Lab A"}
    assert b.fingerprint not in {k["fingerprint"] for k in keys} and a.fingerprint in {k["fingerprint"] for k in keys}
