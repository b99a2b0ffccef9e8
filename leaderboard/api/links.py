"""OpenAPI links between the API's operations (a drf-spectacular postprocessing hook).

A link says how an answer feeds a next request: the `id` a create answers is the `{id}` of the read,
the `run_id` of a run token the `{run_id}` of its receipts. Clients and Swagger UI show them, and
schemathesis' stateful phase follows them to chain requests (tests/service/test_e2e_stateful_api.py):
create a system, then read it and ask a run token for it; list the keys, then try to revoke the first
one (another site's, for the fuzzer's token: a 403). drf-spectacular 0.30 has no per-response links, so
they are added to the finished schema here (server/settings.py SPECTACULAR_SETTINGS POSTPROCESSING_HOOKS).
"""

from __future__ import annotations

from typing import Any

# (name, target operationId, parameters, requestBody or None); the expressions are OpenAPI's
# runtime expressions. A list's links follow its first row (`results/0`): with `?format=json` the
# list is a bare array, where the expression finds nothing and the link is not followed.
Link = tuple[str, str, dict[str, str], dict[str, str] | None]
FIRST = "$response.body#/results/0"
SYSTEM_LINKS: list[Link] = [
    ("GetSystem", "v1_systems_retrieve", {"path.id": "$response.body#/id"}, None),
    ("GetSystemSite", "v1_sites_retrieve", {"path.id": "$response.body#/site/id"}, None),
    ("RequestRunToken", "v1_runs_create", {}, {"system": "$response.body#/id"}),
]
SUBMISSION_LINKS: list[Link] = [
    ("GetSubmission", "v1_submissions_retrieve", {"path.id": "$response.body#/id"}, None),
    ("UploadEvidence", "v1_submissions_evidence_create", {"path.id": "$response.body#/id"}, None),
]
KEY_LINKS: list[Link] = [
    ("GetKey", "v1_keys_retrieve", {"path.id": "$response.body#/id"}, None),
    ("RevokeKey", "v1_keys_revoke_create", {"path.id": "$response.body#/id"}, None),
]
RESULT_LINKS: list[Link] = [
    ("GetResultTrials", "v1_results_trials_list", {"path.id": "$response.body#/id"}, None),
    ("GetResultSystem", "v1_systems_retrieve", {"path.id": "$response.body#/system/id"}, None),
    ("GetResultSite", "v1_sites_retrieve", {"path.id": "$response.body#/site/id"}, None),
]


def _first_row(links: list[Link]) -> list[Link]:
    """The same links from a list's first row."""
    def row(expr: str) -> str:
        return expr.replace("$response.body#", FIRST)
    return [(name, target, {k: row(v) for k, v in params.items()},
             {k: row(v) for k, v in body.items()} if body else None) for name, target, params, body in links]


# source operationId -> status code -> links
LINKS: dict[str, dict[str, list[Link]]] = {
    "v1_systems_create": {"201": SYSTEM_LINKS},
    "v1_systems_retrieve": {"200": SYSTEM_LINKS[1:]},
    "v1_systems_list": {"200": _first_row(SYSTEM_LINKS)},
    "v1_runs_create": {"201": [
        ("GetReceipts", "v1_runs_receipts_list", {"path.run_id": "$response.body#/run_id"}, None),
        ("SendHeartbeat", "v1_runs_heartbeats_create", {"path.run_id": "$response.body#/run_id"}, None),
    ]},
    "v1_submissions_create": {"201": SUBMISSION_LINKS, "200": SUBMISSION_LINKS},
    "v1_submissions_list": {"200": _first_row(SUBMISSION_LINKS)},
    "v1_keys_create": {"201": KEY_LINKS, "200": KEY_LINKS},
    "v1_keys_revoke_create": {"200": KEY_LINKS[:1]},
    "v1_keys_list": {"200": _first_row(KEY_LINKS)},
    "v1_sites_list": {"200": [("GetSite", "v1_sites_retrieve", {"path.id": f"{FIRST}/id"}, None)]},
    "v1_editions_list": {"200": [("GetEdition", "v1_editions_retrieve", {"path.id": f"{FIRST}/id"}, None)]},
    "v1_results_list": {"200": [("GetResult", "v1_results_retrieve", {"path.id": f"{FIRST}/id"}, None),
                                *_first_row(RESULT_LINKS)]},
    "v1_results_retrieve": {"200": RESULT_LINKS},
    "v1_leaderboard_list": {"200": [
        ("GetEntry", "v1_leaderboard_retrieve", {"path.id": f"{FIRST}/id"}, None),
        ("GetResult", "v1_results_retrieve", {"path.id": f"{FIRST}/id"}, None)]},
}


def add_links(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Postprocessing hook: each listed response gets its `links`; a link to an operation the schema lacks is a bug."""
    operations = {op["operationId"]: op for item in result.get("paths", {}).values()
                  for method, op in item.items() if isinstance(op, dict) and "operationId" in op}
    for source, by_status in LINKS.items():
        if source not in operations:
            continue
        for code, links in by_status.items():
            response = operations[source].get("responses", {}).get(code)
            if response is None:
                continue
            out = response.setdefault("links", {})
            for name, target, params, body in links:
                if target not in operations:
                    raise ValueError(f"link {name} of {source}: no operation {target} in the schema")
                link: dict[str, Any] = {"operationId": target}
                if params:
                    link["parameters"] = params
                if body:
                    link["requestBody"] = body
                out[name] = link
    return result
