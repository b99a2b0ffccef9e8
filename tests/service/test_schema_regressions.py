"""What the schemathesis run found (tests/service/test_e2e_fuzz_api.py), each checked in-process against
the served schema through Django's WSGI app: about 3 s.

- a list with `?format=json` answers a bare array, which the schema now allows beside the page;
- a site's blank `url` matched both branches of the schema's `oneOf` (it is a plain string now);
- DRF's own errors (an unknown `?format=`, a missing object, a refused form) came without the
  `check` the documented error answers require;
- /api/v1/witness/ answers null fingerprints before a witness key exists;
- a run's receipts were documented as a page (with page, page_size, ordering) that the view never gave,
  and without their 404 (seen in the stateful run along the schema's links);
- a NUL in a parameter a view reads itself (`?edition=`, `?rules=`) reached PostgreSQL: a 500
  (DataError) where a 400 belongs (server/nul.py; seen in the stateful run).
"""

from __future__ import annotations

import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from server.wsgi import application
from tests.service.conftest import new_site

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def schema():
    return schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


def call(schema, path: str, method: str, **parts):
    case = schema[path][method].Case(**parts)
    response = case.call()
    case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])
    return response


def test_a_json_export_is_a_valid_list_answer(schema):
    new_site("Blank URL site")  # url "" (it matched both branches of the old oneOf)
    for path in ("/api/v1/sites/", "/api/v1/systems/", "/api/v1/results/", "/api/v1/leaderboard/",
                 "/api/v1/submissions/", "/api/v1/editions/"):
        exported = call(schema, path, "GET", query={"format": "json"})
        assert exported.status_code == 200 and isinstance(exported.json(), list), path
        page = call(schema, path, "GET")
        assert isinstance(page.json(), dict) and "count" in page.json(), path


def test_errors_name_their_check(schema):
    a = new_site("Error site")
    headers = {"Authorization": f"Token {a.token}"}
    unknown_format = call(schema, "/api/v1/runs/", "POST", headers=headers, query={"format": "AAA"},
                          body={"system": 1, "preset": "smoke", "rules": "v2", "precision": "fp32", "slots": 1,
                                "devices_per_slot": 1, "duration_s": 60, "runner_version": "2"},
                          media_type="application/json")
    assert unknown_format.status_code == 404 and unknown_format.json()["check"] == "not_found"
    refused = call(schema, "/api/v1/runs/", "POST", headers=headers, media_type="application/json",
                   body={"system": 1, "preset": "smoke", "rules": "nope", "precision": "fp32", "slots": 1,
                         "devices_per_slot": 1, "duration_s": 60, "runner_version": "2"})
    body = refused.json()
    assert refused.status_code == 400 and body["check"] == "request"
    assert body["rules"] and body["detail"].startswith("rules: ")  # the field errors stay as they were
    missing = call(schema, "/api/v1/submissions/{id}/evidence/", "POST", headers=headers,
                   path_parameters={"id": 999999}, body={"trial": "0", "weights": b"x"},
                   media_type="multipart/form-data")
    assert missing.status_code == 404 and missing.json()["check"] == "not_found"


def test_witness_without_a_key_is_valid(schema, settings, tmp_path):
    settings.AIPERF_WITNESS_KEY_FILE = tmp_path / "none.pem"
    answer = call(schema, "/api/v1/witness/", "GET")
    assert answer.json()["fingerprint"] is None


def test_receipts_are_a_plain_list(schema):
    from django.utils import timezone

    from leaderboard.models import Heartbeat, RunAttempt, System

    a, b = new_site("Receipts site"), new_site("Other site")
    system = System.objects.create(site=a.site, name="box", accelerator_model="cpu", registered=True)
    attempt = RunAttempt.objects.create(run_id="ab" * 16, site=a.site, system=system, statement={},
                                        signature="AA==", issued_at=timezone.now(), heartbeat_interval_s=60)
    for seq in (1, 0):
        Heartbeat.objects.create(attempt=attempt, heartbeat_seq=seq, head="0" * 64, received_at=1.0 + seq,
                                 beacon="0" * 64, key="k", signature="AA==")
    operation = schema["/api/v1/runs/{run_id}/receipts/"]["GET"]
    assert {p.name for p in operation.query} == {"format"}  # no page, page_size, ordering
    path = {"run_id": attempt.run_id}
    mine = call(schema, "/api/v1/runs/{run_id}/receipts/", "GET", path_parameters=path,
                headers={"Authorization": f"Token {a.token}"}, query={"page_size": "1", "ordering": "-head"})
    assert [r["heartbeat_seq"] for r in mine.json()] == [0, 1]  # every receipt, in order, whatever the query
    served = schema.raw_schema["paths"]["/api/v1/runs/{run_id}/receipts/"]["get"]["responses"]
    assert served["200"]["content"]["application/json"]["schema"]["type"] == "array"
    other = call(schema, "/api/v1/runs/{run_id}/receipts/", "GET", path_parameters=path,
                 headers={"Authorization": f"Token {b.token}"})
    assert other.status_code == 404 and other.json()["check"] == "run"  # documented now, and valid


@pytest.mark.parametrize("query", [{"edition": "p7\x00"}, {"rules": "\x00", "format": "csv"}])
def test_a_nul_in_a_parameter_is_a_bad_request(schema, query):
    refused = call(schema, "/api/v1/leaderboard/", "GET", query=query)
    assert refused.status_code == 400 and refused.json()["check"] == "request"
    assert "NUL" in refused.json()["detail"]
