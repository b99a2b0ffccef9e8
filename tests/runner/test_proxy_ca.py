"""Submission from behind a gateway: the runner's HTTP client (service.client) honours HTTPS_PROXY
and SSL_CERT_FILE. A local proxy that records CONNECT, and a local HTTPS server with a self-signed
certificate; no network. About 1 s."""

from __future__ import annotations

import datetime
import http.server
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from aiperf_runner.client.service import Service, client
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@contextmanager
def recording_proxy() -> Iterator[tuple[str, list[str]]]:
    """A proxy that answers every request 502 after recording its first line."""
    seen: list[str] = []
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                seen.append(conn.recv(4096).split(b"\r\n", 1)[0].decode())
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", seen
    finally:
        server.close()


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "ca.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_https_proxy_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    with recording_proxy() as (proxy, seen):
        monkeypatch.setenv("HTTPS_PROXY", proxy)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        with client(Service("https://aiperf.example.invalid", "t")) as c, pytest.raises(httpx.ProxyError):
            c.get("/api/v1/")
    assert seen == ["CONNECT aiperf.example.invalid:443 HTTP/1.1"]


def test_ssl_cert_file_is_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert_file, key_file = self_signed(tmp_path)
    server = http.server.HTTPServer(("127.0.0.1", 0), Hello)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
    url = f"https://localhost:{server.server_address[1]}"
    try:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        with client(Service(url, "t")) as c, pytest.raises(httpx.ConnectError):
            c.get("/")  # the default trust store does not know the site's CA
        monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
        with client(Service(url, "t")) as c:
            assert c.get("/").json() == {"ok": True}
    finally:
        server.shutdown()
        server.server_close()
