"""Talking to an AIPerf service: where it is, the site's token, and the requests the runner makes.

`aiperf-runner register` saves the server and token in the config directory (`service.json`, mode
0600, beside the site key); every command that talks to the service takes them from `--server` /
`--token`, else `$AIPERF_SERVER` / `$AIPERF_TOKEN`, else that file. Requests are retried with
exponential back-off on connection errors and 429/5xx.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiperf_runner.spec import keys
from aiperf_runner.spec.errors import AiperfError

if TYPE_CHECKING:
    import httpx  # imported when a command talks to a server: `aiperf-runner` starts faster

SERVICE_FILE = "service.json"
RETRY_STATUS = {429, 500, 502, 503, 504}


class Failure(AiperfError):
    """What to tell the user before exiting with status 1 (`check`: the service's check name, if any)."""

    def __init__(self, message: str, check: str | None = None, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.check = check
        self.data = data or {}


@dataclass(frozen=True)
class Service:
    server: str
    token: str


def service_file() -> Path:
    return keys.config_dir() / SERVICE_FILE


def save_service(server: str, token: str) -> Path:
    """Remember the server and token for later commands (mode 0600: the token is a credential)."""
    path = service_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"server": server.rstrip("/"), "token": token}, fh)
    os.replace(tmp, path)
    return path


def _saved() -> dict[str, Any]:
    """What `register` saved ({} when nothing readable is)."""
    try:
        saved = json.loads(service_file().read_text())
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


def find_server(server: str | None = None) -> str | None:
    """The service's address alone (no token needed): option, then environment, then what `register` saved."""
    found = server or os.environ.get("AIPERF_SERVER") or _saved().get("server")
    return str(found).rstrip("/") if found else None


def find_service(server: str | None = None, token: str | None = None, *, required: bool = True) -> Service | None:
    """The service to talk to: options, then environment, then what `register` saved."""
    server = server or os.environ.get("AIPERF_SERVER") or None
    token = token or os.environ.get("AIPERF_TOKEN") or None
    if not (server and token):
        saved = _saved()
        server = server or saved.get("server")
        token = token or saved.get("token")
    if server and token:
        return Service(str(server).rstrip("/"), str(token))
    if required:
        raise Failure("no AIPerf service configured: pass --server and --token (or set AIPERF_SERVER and "
                      "AIPERF_TOKEN), or run `aiperf-runner register --server URL --token T` once", "usage")
    return None


def client(service: Service, timeout: float = 60.0) -> httpx.Client:
    import httpx

    return httpx.Client(base_url=service.server, headers={"Authorization": f"Token {service.token}",
                                                          "Accept": "application/json"},
                        timeout=httpx.Timeout(timeout, connect=10.0), follow_redirects=True)


def detail(resp: httpx.Response) -> tuple[str, str | None]:
    """The service's explanation of a refusal, and the check it names."""
    try:
        body = resp.json()
    except ValueError:
        return f"HTTP {resp.status_code}: {resp.text[:300]}", None
    if isinstance(body, dict):
        if "detail" in body:
            return str(body["detail"]), body.get("check")
        return "; ".join(f"{k}: {v}" for k, v in body.items()), None
    return str(body), None


def request(send: Callable[[], httpx.Response], what: str, retries: int, backoff: float,
            say: Callable[[str], None]) -> httpx.Response:
    """Send with retries on connection errors and 429/5xx (exponential backoff)."""
    import httpx

    delay = backoff
    for attempt in range(retries + 1):
        try:
            resp = send()
        except httpx.TransportError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        else:
            if resp.status_code not in RETRY_STATUS:
                return resp
            problem = f"HTTP {resp.status_code}"
        if attempt == retries:
            raise Failure(f"{what} failed after {retries + 1} attempts ({problem})", "network")
        say(f"{what}: {problem}; trying again in {delay:.0f} s")
        time.sleep(delay)
        delay = min(delay * 2, 60.0)
    raise AssertionError("unreachable")


def quiet(message: str) -> None:
    return None


def call(service: Service, method: str, path: str, what: str, *, ok: tuple[int, ...] = (200,), retries: int = 3,
         say: Callable[[str], None] = quiet, **kwargs: Any) -> httpx.Response:
    """One API request; Failure with the service's reason unless the status is in `ok`."""
    with client(service) as c:
        resp = request(lambda: c.request(method, path, **kwargs), what, retries, 1.0, say)
    if resp.status_code == 401:
        raise Failure("the service does not know this token (HTTP 401)", "token")
    if resp.status_code not in ok:
        message, check = detail(resp)
        raise Failure(f"{what}: refused by the service (HTTP {resp.status_code}): {message}", check,
                      {"http_status": resp.status_code})
    return resp


# ---- systems -----------------------------------------------------------------------------------------
def add_system(service: Service, fields: dict[str, Any]) -> dict[str, Any]:
    resp = call(service, "POST", "/api/v1/systems/", "registering the system", ok=(201,), json=fields)
    data: dict[str, Any] = resp.json()
    return data


def list_systems(service: Service) -> list[dict[str, Any]]:
    """The site's own registered systems."""
    resp = call(service, "GET", "/api/v1/systems/", "listing the systems", params={"mine": "1", "page_size": 1000})
    body = resp.json()
    items: list[dict[str, Any]] = body.get("results", body) if isinstance(body, dict) else body
    return items


def resolve_system(service: Service, id_or_name: str) -> dict[str, Any]:
    """One of the site's registered systems, by id or by name."""
    systems = list_systems(service)
    found = [s for s in systems if str(s.get("id")) == id_or_name] or \
        [s for s in systems if str(s.get("name", "")).lower() == id_or_name.strip().lower()]
    if not found:
        known = ", ".join(f"{s['id']} ({s.get('name') or 'unnamed'})" for s in systems) or "none"
        raise Failure(f"no registered system {id_or_name!r} for this site (registered: {known}); "
                      "add it with `aiperf-runner system add`", "system")
    if len(found) > 1:
        raise Failure(f"{len(found)} systems are named {id_or_name!r}: give its id instead", "system")
    return found[0]


# ---- witnessed runs --------------------------------------------------------------------------------------
def request_run_token(service: Service, fields: dict[str, Any]) -> dict[str, Any]:
    """Ask the service to witness a run: {run_id, token: {statement, signature}, heartbeat_interval_s, witness}."""
    resp = call(service, "POST", "/api/v1/runs/", "asking for a run token", ok=(201,), json=fields)
    data: dict[str, Any] = resp.json()
    return data


def post_heartbeat(service: Service, run_id: str, body: dict[str, Any], timeout: float = 20.0,
                   http: httpx.Client | None = None) -> httpx.Response:
    """One heartbeat, no retries (the caller's loop retries with a fresh heartbeat). `http`: a client kept
    across heartbeats (making one loads the CA store: most of a heartbeat's CPU)."""
    if http is not None:
        return http.post(f"/api/v1/runs/{run_id}/heartbeats/", json=body)
    with client(service, timeout=timeout) as c:
        return c.post(f"/api/v1/runs/{run_id}/heartbeats/", json=body)


def run_receipts(service: Service, run_id: str) -> list[dict[str, Any]]:
    """Every receipt the service issued for a run (to log those a killed controller never wrote)."""
    resp = call(service, "GET", f"/api/v1/runs/{run_id}/receipts/", "reading the run's receipts")
    items: list[dict[str, Any]] = resp.json()
    return items
