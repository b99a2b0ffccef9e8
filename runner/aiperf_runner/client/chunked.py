"""Uploading a big bundle in chunks that survive a cut connection and a restart of either side (tus 1.0.0).

The upload's URL is kept beside the bundle (`<bundle>.upload.json`, with the bundle's size, mtime and
sha256), so `aiperf-runner submit` run again with the same bundle resumes where the service stopped
instead of starting over; the service also answers a new creation for the same digest with the site's
unfinished upload. Before each chunk the runner asks the service for its offset (HEAD): the service's file
is the truth, whatever the runner believed it had sent. The service checks the sha256 once, at the end.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiperf_runner.client.service import RETRY_STATUS, Failure, detail
from aiperf_runner.spec.bundle import sha256_file

if TYPE_CHECKING:
    import httpx

TUS = {"Tus-Resumable": "1.0.0"}
STATE_SUFFIX = ".upload.json"
PIECE = 1 << 20


def state_path(bundle: Path) -> Path:
    return bundle.with_name(bundle.name + STATE_SUFFIX)


def _identity(bundle: Path, server: str) -> dict[str, Any]:
    st = bundle.stat()
    return {"server": server, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def load_state(bundle: Path, server: str) -> dict[str, Any]:
    """What an earlier run kept about this bundle's upload to this server (nothing if the bundle changed)."""
    try:
        saved = json.loads(state_path(bundle).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(saved, dict) or any(saved.get(k) != v for k, v in _identity(bundle, server).items()):
        return {}
    return saved


def save_state(bundle: Path, server: str, **fields: Any) -> None:
    path = state_path(bundle)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**_identity(bundle, server), **fields}))
    os.replace(tmp, path)


def _body(path: Path, at: int, count: int) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        fh.seek(at)
        left = count
        while left > 0:
            piece = fh.read(min(PIECE, left))
            if not piece:
                raise OSError(f"{path} is shorter than it was: it changed during the upload")
            left -= len(piece)
            yield piece


def _refused(resp: httpx.Response) -> Failure:
    if resp.status_code == 401:
        return Failure("the service does not know this token (HTTP 401)", "token")
    message, check = detail(resp)
    return Failure(f"refused by the service (HTTP {resp.status_code}, check {check or '?'}): {message}", check,
                   {"http_status": resp.status_code})


def upload(c: httpx.Client, server: str, path: Path, chunk_size: int, retries: int, backoff: float,
           say: Callable[[str], None], *, rehearsal: bool = False) -> httpx.Response:
    """Upload `path` in chunks of `chunk_size` bytes; the service's last answer (200/201, the submission).
    `rehearsal`: announced as a rehearsal's run.

    `retries` failures in a row with no progress (a cut connection, a service restarting, 429/5xx) give up;
    any progress resets the count.
    """
    import httpx

    size = path.stat().st_size
    saved = load_state(path, server)
    digest = saved.get("sha256") or sha256_file(path)
    url: str | None = saved.get("url")
    if url:
        say(f"resuming the upload {url}")
    failures, delay, best = 0, backoff, -1

    def failed(problem: str) -> None:
        nonlocal failures, delay
        failures += 1
        if failures > retries:
            raise Failure(f"uploading failed after {failures} attempts without progress ({problem}); run the "
                          "same command again to resume", "network")
        say(f"uploading: {problem}; trying again in {delay:.0f} s")
        time.sleep(delay)
        delay = min(delay * 2, 60.0)

    while True:
        try:
            if url is None:
                meta = f"sha256 {base64.b64encode(digest.encode()).decode()}," \
                       f"filename {base64.b64encode(path.name.encode()).decode()}"
                if rehearsal:
                    meta += f",rehearsal {base64.b64encode(b'true').decode()}"
                resp = c.post("/api/v1/uploads/", headers={**TUS, "Upload-Length": str(size),
                                                           "Upload-Metadata": meta})
                if resp.status_code == 200:
                    return resp  # submitted before
                if resp.status_code != 201:
                    if resp.status_code in RETRY_STATUS:
                        failed(f"HTTP {resp.status_code}")
                        continue
                    raise _refused(resp)
                url = urlsplit(resp.headers["Location"]).path
                save_state(path, server, url=url, sha256=digest)
            resp = c.head(url, headers=TUS)
            if resp.status_code == 404:  # removed by the service (too old, or refused): start over
                say("the service no longer holds this upload; starting it again")
                url = None
                state_path(path).unlink(missing_ok=True)
                continue
            if resp.status_code != 200:
                if resp.status_code in RETRY_STATUS:
                    failed(f"HTTP {resp.status_code}")
                    continue
                raise _refused(resp)
            offset = int(resp.headers["Upload-Offset"])
            if offset > best:
                failures, delay, best = 0, backoff, offset
            count = min(chunk_size, size - offset)
            say(f"uploading: {offset / 1e6:.1f} of {size / 1e6:.1f} MB on the service; sending {count / 1e6:.1f} MB")
            resp = c.patch(url, content=_body(path, offset, count),
                           headers={**TUS, "Upload-Offset": str(offset), "Content-Length": str(count),
                                    "Content-Type": "application/offset+octet-stream"})
        except httpx.TransportError as exc:
            failed(f"{type(exc).__name__}: {exc}")
            continue
        if resp.status_code in (200, 201):
            state_path(path).unlink(missing_ok=True)
            return resp
        if resp.status_code == 204:
            continue
        if resp.status_code == 409 or resp.status_code in RETRY_STATUS:  # 409: ask the offset again
            failed(f"HTTP {resp.status_code}")
            continue
        if resp.status_code == 404:  # removed meanwhile: start over
            url = None
            state_path(path).unlink(missing_ok=True)
            continue
        if resp.status_code in (400, 403):  # refused for good (its sha256, a check): the service removed it
            state_path(path).unlink(missing_ok=True)
        raise _refused(resp)
