"""OpenAPI schema (validated), the docs page with locally served assets, compose and Dockerfile."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tests.helpers import REPO


def test_spectacular_validate():
    out = subprocess.run([sys.executable, "manage.py", "spectacular", "--validate", "--fail-on-warn",
                          "--file", "/dev/null"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_schema_and_docs_served(client, db):
    schema = client.get("/api/schema/?format=json").json()
    paths = schema["paths"]
    for p in ("/api/v1/leaderboard/", "/api/v1/results/{id}/", "/api/v1/systems/", "/api/v1/sites/",
              "/api/v1/editions/", "/api/v1/submissions/", "/api/v1/keys/", "/api/v1/log/head/", "/api/v1/log/key/",
              "/api/v1/log/entries/", "/api/v1/log/consistency/", "/api/v1/results/{result_id}/proof/"):
        assert p in paths, p
    assert "post" in paths["/api/v1/submissions/"]
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in html
    assert "cdn" not in html.lower()


def test_schema_links_chain_creates_to_reads(client, db):
    """The OpenAPI links (leaderboard/api/links.py) that schemathesis' stateful phase follows: each is
    in the served schema, names an existing operation, and schemathesis turns every one into a transition."""
    import schemathesis

    from leaderboard.api.links import LINKS

    served = client.get("/api/schema/?format=json").json()
    ops = {op["operationId"]: op for item in served["paths"].values() for op in item.values() if "operationId" in op}
    created = ops["v1_systems_create"]["responses"]["201"]["links"]
    assert created["GetSystem"] == {"operationId": "v1_systems_retrieve", "parameters": {"path.id": "$response.body#/id"}}
    assert created["RequestRunToken"]["requestBody"] == {"system": "$response.body#/id"}
    assert ops["v1_runs_create"]["responses"]["201"]["links"]["GetReceipts"]["operationId"] == "v1_runs_receipts_list"
    assert set(ops["v1_submissions_create"]["responses"]["201"]["links"]) == {"GetSubmission", "UploadEvidence"}
    declared = sum(len(links) for by_status in LINKS.values() for links in by_status.values())
    assert sum(len(r.get("links", {})) for op in ops.values() for r in op["responses"].values()) == declared
    machine = schemathesis.openapi.from_dict(served).as_state_machine()  # raises on a link it cannot follow
    explicit = {link.full_name for t in machine._transitions.operations.values() for link in t.outgoing
                if not link.is_inferred}
    assert len(explicit) == declared, sorted(explicit)


def test_docker_compose_services():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "web", "worker", "beat"} <= set(services)
    images = {(json.dumps(services[s].get("build"), sort_keys=True), services[s]["image"])
              for s in ("web", "worker", "beat")}
    assert len(images) == 1  # one image, built from the Dockerfile at the root
    build, image = images.pop()
    assert json.loads(build)["context"] == "." and image == "${AIPERF_IMAGE:-aiperf-service:latest}"
    # Official images unless the variables name others (scripts/compose-check.sh builds local ones).
    assert services["postgres"]["image"] == "${POSTGRES_IMAGE:-postgres:16}"
    assert services["redis"]["image"] == "${REDIS_IMAGE:-redis:7}"
    assert json.loads(build)["args"]["BASE_IMAGE"] == "${BASE_IMAGE:-python:3.11-slim-bookworm}"
    assert "ARG BASE_IMAGE=python:3.11-slim-bookworm" in (REPO / "Dockerfile").read_text()
    for name in ("postgres", "redis", "web", "worker", "beat"):
        assert "healthcheck" in services[name], name
    assert "gunicorn" in services["web"]["command"]
    assert services["worker"]["command"][:4] == ["celery", "-A", "server", "worker"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "server", "beat"]
    env = services["web"]["environment"]
    assert env["DATABASE_URL"].startswith("postgres://") and env["CELERY_BROKER_URL"].startswith("redis://")
    assert (REPO / "Dockerfile").is_file()


def test_schema_reads_as_documentation(client, db):
    """A tag per resource with what it holds, a summary on every operation, a view's description said once,
    the public reads documented as needing no token (writes need one), and the schema built once."""
    from leaderboard.api.schemaview import CachedSchemaView

    CachedSchemaView._built.clear()
    schema = client.get("/api/schema/?format=json").json()
    tags = {t["name"]: t.get("description") for t in schema["tags"]}
    assert {"leaderboard", "results", "systems", "submissions", "log", "runs"} <= set(tags) and all(tags.values())
    ops = [(path, method, op) for path, item in schema["paths"].items() for method, op in item.items()]
    for path, method, op in ops:
        assert op["summary"] and op["tags"][0] in tags, (method, path, op.get("tags"))
        anonymous = {} in op["security"]
        public = method == "get" and not path.startswith("/api/v1/uploads/")
        assert anonymous == public, (method, path, op["security"])
    described = [op["description"] for _, _, op in ops if op.get("description")]
    assert len(described) == len(set(described)), "a description repeated on several operations"
    assert CachedSchemaView._built  # kept: the next request renders it without building it again
    assert client.get("/api/schema/?format=json").json() == schema
