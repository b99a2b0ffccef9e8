"""The relay's forwarding on this machine (client/relay.py): requests and bodies go through as they
came, a service's Location comes back as the relay's address, an unreachable service is a 502 that
says so, and `--listen` is checked. The relay for a controller without a route to the service, end to
end: tests/service/test_relay.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from aiperf_runner.cli import app
from aiperf_runner.client.relay import Relay, RelayError, parse_listen
from aiperf_runner.client.service import find_server, save_service
from typer.testing import CliRunner


class Upstream(BaseHTTPRequestHandler):
    """A stand-in service: echoes what it got; a POST answers 201 with an absolute Location."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        echo = json.dumps({"method": self.command, "path": self.path, "body": body.decode(),
                           "authorization": self.headers.get("Authorization"),
                           "forwarded_for": self.headers.get("X-Forwarded-For")}).encode()
        self.send_response(201 if self.command == "POST" else 200)
        if self.command == "POST":
            host, port = self.server.server_address[:2]
            self.send_header("Location", f"http://{host!s}:{port}/api/v1/uploads/abc/")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(echo)))
        self.end_headers()
        self.wfile.write(echo)

    do_GET = do_POST = do_PATCH = _answer


def serve(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def relay() -> Iterator[tuple[Relay, ThreadingHTTPServer]]:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    serve(upstream)
    host, port = upstream.server_address[:2]
    r = Relay(("127.0.0.1", 0), f"http://{host!s}:{port}")
    serve(r)
    try:
        yield r, upstream
    finally:
        r.shutdown()
        r.server_close()
        upstream.shutdown()
        upstream.server_close()


def test_requests_go_through_as_they_came(relay: tuple[Relay, ThreadingHTTPServer]) -> None:
    r, _ = relay
    base = f"http://{r.address}"
    got = httpx.patch(f"{base}/api/v1/runs/x/heartbeats/?a=1", content=b"x" * 200_000,
                      headers={"Authorization": "Token T"}).json()
    assert (got["method"], got["path"], got["body"], got["authorization"]) == (
        "PATCH", "/api/v1/runs/x/heartbeats/?a=1", "x" * 200_000, "Token T")
    assert got["forwarded_for"] == "127.0.0.1"
    created = httpx.post(f"{base}/api/v1/uploads/", content=b"{}")
    assert created.status_code == 201
    assert created.headers["Location"] == f"{base}/api/v1/uploads/abc/"  # back through the relay
    assert r.forwarded == 2


def test_an_unreachable_service_is_a_502_that_says_so(relay: tuple[Relay, ThreadingHTTPServer]) -> None:
    r, upstream = relay
    upstream.shutdown()
    upstream.server_close()
    resp = httpx.get(f"http://{r.address}/api/v1/")
    assert resp.status_code == 502
    assert "could not reach the service" in resp.json()["detail"]


@pytest.mark.parametrize("listen, expected", [("0.0.0.0:8700", ("0.0.0.0", 8700)), (":8700", ("0.0.0.0", 8700)),
                                              ("[::1]:8700", ("::1", 8700))])
def test_listen_addresses(listen: str, expected: tuple[str, int]) -> None:
    assert parse_listen(listen) == expected


@pytest.mark.parametrize("listen", ["8700", "host:", "host:0", "host:70000", "host:http"])
def test_a_malformed_listen_is_refused(listen: str) -> None:
    with pytest.raises(RelayError, match="expected HOST:PORT"):
        parse_listen(listen)


def test_an_ipv6_listen_address_listens(relay: tuple[Relay, ThreadingHTTPServer]) -> None:
    _, upstream = relay
    host, port = upstream.server_address[:2]
    r6 = Relay(("::1", 0), f"http://{host!s}:{port}")  # as parse_listen("[::1]:PORT") gives it
    try:
        assert r6.address.startswith("[::1]:")
    finally:
        r6.server_close()


def test_the_relay_takes_the_saved_server_and_refuses_a_bad_listen_as_usage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIPERF_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("AIPERF_SERVER", raising=False)
    monkeypatch.delenv("AIPERF_TOKEN", raising=False)
    nothing = CliRunner().invoke(app, ["relay", "--listen", "127.0.0.1:0"])
    assert nothing.exit_code == 2 and "no service to relay to" in nothing.output, nothing.output
    save_service("http://127.0.0.1:9/", "saved-token")
    assert find_server() == "http://127.0.0.1:9"
    bad = CliRunner().invoke(app, ["relay", "--listen", "host:http"])
    assert bad.exit_code == 2 and "expected HOST:PORT" in bad.output, bad.output
