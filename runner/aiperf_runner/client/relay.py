"""`aiperf-runner relay`: forwards a controller's service traffic from compute nodes without internet.

Runs on a host that reaches the service (a login node), listening where the compute nodes reach it;
controllers point `--server` at it. Every request (run token, heartbeats, receipts, submissions and
chunked uploads) goes on to the service as it came, its body streamed (the service's answers, small,
are read whole and sent back with their length), through the site's proxy when `HTTPS_PROXY` says so
(httpx honours it). The relay holds no state: heartbeats are signed
by the site key end to end and the service keeps every receipt, so a relay killed and restarted
loses nothing (the controller retries, and fetches any receipt it missed). A `Location` the service
answers with (a chunked upload's address) is rewritten to the relay's own address, so the next
request comes back through it.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import httpx

from aiperf_runner.spec.errors import AiperfError

log = logging.getLogger(__name__)

CHUNK = 1 << 16
# Headers of one connection, not of the request: never forwarded (RFC 9110 7.6.1).
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host", "content-length"})


class RelayError(AiperfError):
    """The relay cannot start (an address in use, a malformed --listen)."""


def parse_listen(listen: str) -> tuple[str, int]:
    """'HOST:PORT' (or ':PORT', '[::1]:PORT') -> (host, port)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise RelayError(f"--listen {listen!r}: expected HOST:PORT, e.g. 0.0.0.0:8700")
    return host.strip("[]") or "0.0.0.0", int(port)


class Relay(ThreadingHTTPServer):
    """The listening server; `upstream` is the service's base URL."""

    daemon_threads = True

    def __init__(self, listen: tuple[str, int], upstream: str, timeout: float = 600.0) -> None:
        if ":" in listen[0]:  # an IPv6 address ('[::1]:8700'): the server's socket is IPv4 unless told
            self.address_family = socket.AF_INET6
        self.upstream = upstream.rstrip("/")
        self.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=30.0), follow_redirects=False,
                                   trust_env=True)
        self.forwarded = 0
        self._count = threading.Lock()
        try:
            super().__init__(listen, _Forward)
        except OSError as exc:
            raise RelayError(f"cannot listen on {listen[0]}:{listen[1]}: {exc.strerror or exc}") from None

    @property
    def address(self) -> str:
        """'HOST:PORT' it listens on."""
        host = str(self.server_address[0])
        return f"[{host}]:{self.server_address[1]}" if ":" in host else f"{host}:{self.server_address[1]}"

    def server_close(self) -> None:
        super().server_close()
        self.client.close()


class _Forward(BaseHTTPRequestHandler):
    server: Relay
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._forward()

    do_POST = do_PATCH = do_PUT = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.info("%s %s", self.address_string(), format % args)

    def _body(self) -> Iterator[bytes]:
        left = int(self.headers.get("Content-Length") or 0)
        while left > 0:
            chunk = self.rfile.read(min(CHUNK, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk

    def _forward(self) -> None:
        relay = self.server
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["X-Forwarded-For"] = self.client_address[0]
        length = self.headers.get("Content-Length")
        if length:
            headers["Content-Length"] = length
        request = relay.client.build_request(self.command, relay.upstream + self.path, headers=headers,
                                             content=self._body() if length else None)
        try:
            response = relay.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            self._fail(502, f"the relay could not reach the service at {relay.upstream}: {exc}")
            return
        with relay._count:  # the service has it: counted before the answer goes back, which a client may await
            relay.forwarded += 1
        try:
            self.send_response(response.status_code, response.reason_phrase)
            for key, value in response.headers.multi_items():
                if key.lower() in HOP_BY_HOP or key.lower() == "content-encoding":
                    continue
                if key.lower() == "location":
                    value = self._local(value)
                self.send_header(key, value)
            body = b"".join(response.iter_bytes()) if self.command != "HEAD" else b""
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)
        finally:
            response.close()

    def _local(self, location: str) -> str:
        """A Location of the service, as the address the client used for the relay."""
        upstream = self.server.upstream
        if location.startswith(upstream):
            host, port = str(self.server.server_address[0]), int(self.server.server_address[1])
            return f"http://{self.headers.get('Host') or f'{host}:{port}'}{location[len(upstream):]}"
        if location.startswith("/"):  # relative to the service's root: keep any path prefix of ours out
            prefix = urlsplit(upstream).path.rstrip("/")
            return location[len(prefix):] if prefix and location.startswith(prefix) else location
        return location

    def _fail(self, status: int, message: str) -> None:
        body = json.dumps({"detail": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

