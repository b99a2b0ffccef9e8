"""Submitting to an AIPerf service: register the site's key, upload a run's bundle and wait for its
verification, answer the service's challenge with the challenged trials' weights.

What `aiperf-runner register`, `submit` and `evidence` do, without the command line: every refusal is
a `Failure` with the service's message. Progress notes go to stderr (stdout keeps the result alone).
Before a witnessed run directory is packed, the caller completes its witnessing
(aiperf_runner/run/heartbeats.py `complete_witness`): this layer does not reach the run's controller.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiperf_runner.client import chunked
from aiperf_runner.client.service import Failure, Service, client, detail, request
from aiperf_runner.rundir.publish import write_public_logs
from aiperf_runner.spec import bundle, keys
from aiperf_runner.spec.proof import STATES
from aiperf_runner.spec.retention import WEIGHTS

if TYPE_CHECKING:
    import httpx  # imported when a command talks to a server: `aiperf-runner` starts faster

DONE = ("verified", "published", "rejected", "withdrawn")
CHUNK_SIZE = 64 << 20  # bundles larger than this go in resumable chunks of this size

Say = Callable[[str], None]


def say_to_stderr(quiet: bool) -> Say:
    """How progress notes are told: on stderr, or not at all (`--json` keeps stdout for the result)."""
    if quiet:
        return lambda message: None
    return lambda message: print(message, file=sys.stderr, flush=True)


def register_key(service: Service, public_key: Path | None = None, label: str = "",
                 retries: int = 3) -> dict[str, Any]:
    """Upload the site's public key; the service's answer plus `created`."""
    key = keys.load_public_key(public_key)
    with client(service) as c:
        resp = request(lambda: c.post("/api/v1/keys/", json={"public_key": keys.public_line(key), "label": label}),
                       "registering the key", retries, 1.0, say_to_stderr(True))
    if resp.status_code in (200, 201):
        return {**resp.json(), "created": resp.status_code == 201}
    message, check = detail(resp)
    raise Failure(f"the service refused the key (HTTP {resp.status_code}): {message}", check)


def _bundle_for(path: Path, key_path: Path | None, say: Say) -> Path:
    """The bundle to upload: a bundle as it is, or the run directory signed and packed.

    A run directory packed before, unchanged since and signed by this key reuses its bundle, so
    submitting again uploads the same bytes (and the service answers with the same submission).
    """
    if path.is_file():
        return path
    if not path.is_dir():
        raise Failure(f"{path} is neither a run directory nor a bundle")
    private = keys.load_private_key(key_path)
    write_public_logs(path)  # unchanged copies are left alone, so an unchanged run still reuses its bundle
    out = path.parent / f"{path.resolve().name}.tar.gz"
    manifest = path / bundle.MANIFEST_NAME
    if out.is_file() and manifest.is_file() and out.stat().st_mtime >= manifest.stat().st_mtime \
            and not bundle.check_manifest(path, private):
        say(f"reusing {out} (the run is unchanged since it was packed)")
        return out
    say(f"signing and packing {path} -> {out}")
    return bundle.pack(path, out, private)


def submit_bundle(service: Service, path: Path, *, key_path: Path | None = None, wait: bool = True,
                  timeout: float = 600.0, retries: int = 5, backoff: float = 2.0,
                  quiet: bool = False, chunk_size: int = CHUNK_SIZE, rehearsal: bool = False) -> dict[str, Any]:
    """Upload and (optionally) wait; return the submission as the service last described it.

    A bundle larger than `chunk_size` bytes goes in resumable chunks (aiperf_runner/client/chunked.py); a smaller
    one, or any with `chunk_size` 0, in one request. `rehearsal`: submitted as a rehearsal (`run --rehearsal`).
    """
    say = say_to_stderr(quiet)
    try:
        out = _bundle_for(path, key_path, say)
    except (keys.KeyFileError, bundle.BundleError) as exc:
        raise Failure(str(exc)) from None
    size = out.stat().st_size
    say(f"uploading {out.name} ({size / 1e6:.1f} MB) to {service.server}")

    with client(service, timeout=max(60.0, size / 1e6)) as c:
        def send() -> httpx.Response:
            with open(out, "rb") as fh:
                return c.post("/api/v1/submissions/", files={"bundle": (out.name, fh, "application/gzip")},
                              data={"rehearsal": "true"} if rehearsal else None)

        if chunk_size and size > chunk_size:
            resp = chunked.upload(c, service.server, out, chunk_size, retries, backoff, say, rehearsal=rehearsal)
        else:
            resp = request(send, "uploading", retries, backoff, say)
        if resp.status_code == 401:
            raise Failure("the service does not know this token (HTTP 401)", "token")
        if resp.status_code not in (200, 201):
            message, check = detail(resp)
            raise Failure(f"refused by the service (HTTP {resp.status_code}, check {check or '?'}): {message}",
                          check, {"http_status": resp.status_code})
        sub = resp.json()
        if resp.status_code == 200:
            say(f"this bundle was submitted before: submission {sub['id']}")
        sub["bundle"] = str(out)
        deadline = time.monotonic() + timeout
        pause = 0.5
        while wait and sub["status"] not in DONE:
            if time.monotonic() >= deadline:
                sub["timed_out"] = True
                break
            time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
            pause = min(pause * 1.5, 5.0)
            status_url = f"/api/v1/submissions/{sub['id']}/"
            r = request(partial(c.get, status_url), "checking the status", retries, backoff, say)
            if r.status_code != 200:
                message, _ = detail(r)
                raise Failure(f"cannot read submission {sub['id']} (HTTP {r.status_code}): {message}")
            sub = {**r.json(), "bundle": str(out)}
        if wait and path.is_dir() and asks(sub) and sub["status"] in ("verified", "published"):
            sub = {**answer_challenge(c, path, sub, say, deadline, retries, backoff), "bundle": str(out)}
    return sub


def asks(sub: dict[str, Any]) -> bool:
    """Whether the service's challenge asks for anything (weights, committed states)."""
    return bool(sub.get("challenge") or sub.get("states"))


def answer_challenge(c: httpx.Client, run_dir: Path, sub: dict[str, Any], say: Say, deadline: float,
                     retries: int = 5, backoff: float = 2.0) -> dict[str, Any]:
    """Upload the weights of every challenged trial and every committed state asked for, not uploaded yet,
    then wait for the audit."""
    sub = _upload_states(c, run_dir, sub, say, retries, backoff)
    url = f"/api/v1/submissions/{sub['id']}/evidence/"
    for trial in sub["challenge"]:
        if trial in (sub.get("evidence") or []):
            continue
        weights = run_dir / "trials" / trial / WEIGHTS
        if not weights.is_file():
            raise Failure(f"the service asks for the weights of trial {trial}, but {weights} is missing: "
                          "they were kept by the log and must stay until the audit", "audit.weights")
        say(f"uploading the weights of challenged trial {trial} ({weights.stat().st_size / 1e6:.1f} MB)")

        def send(trial: str = trial, weights: Path = weights) -> httpx.Response:
            with open(weights, "rb") as fh:
                return c.post(url, data={"trial": trial},
                              files={"weights": (weights.name, fh, "application/octet-stream")})

        resp = request(send, f"uploading trial {trial}'s weights", retries, backoff, say)
        if resp.status_code != 201:
            message, check = detail(resp)
            raise Failure(f"the service refused trial {trial}'s weights (HTTP {resp.status_code}): {message}", check)
        sub = resp.json()
    pause = 0.5
    while sub.get("audit") == "pending" and sub["status"] in ("verified", "published") and not sub.get("audit_note"):
        if time.monotonic() >= deadline:
            sub["timed_out"] = True
            break
        time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
        pause = min(pause * 1.5, 5.0)
        r = request(partial(c.get, f"/api/v1/submissions/{sub['id']}/"), "checking the audit", retries, backoff, say)
        sub = r.json()
    return sub


def _upload_states(c: httpx.Client, run_dir: Path, sub: dict[str, Any], say: Say, retries: int,
                   backoff: float) -> dict[str, Any]:
    """The training states the audit re-executes from and to: an image trial's committed states
    (trials/<id>/states/<sha256>.safetensors), an AIPerf-LLM trial's weights and its parent's weights and moments
    (the `path` the service names for each)."""
    url = f"/api/v1/submissions/{sub['id']}/states/"
    have = set(sub.get("states_received") or [])
    wanted = [(w, state_file(run_dir, w)) for w in sub.get("states") or [] if w["sha256"] not in have]
    if wanted:
        size = sum(path.stat().st_size for _, path in wanted if path.is_file())
        say(f"uploading {len(wanted)} training states for the audit's re-execution ({size / 1e6:.1f} MB)")
    for w, path in wanted:
        if not path.is_file():
            what = "committed state" if path.parent.name == STATES else path.name
            raise Failure(f"the service asks for trial {w['trial']}'s {what} {w['sha256'][:16]}..., but {path} is "
                          "missing: the files a run's log binds must stay until the audit", "audit.state")

        def send(sha: str = w["sha256"], path: Path = path) -> httpx.Response:
            with open(path, "rb") as fh:
                return c.post(url, data={"sha256": sha}, files={"state": (path.name, fh, "application/octet-stream")})

        resp = request(send, f"uploading state {w['sha256'][:12]}", retries, backoff, say)
        if resp.status_code != 201:
            message, check = detail(resp)
            raise Failure(f"the service refused state {w['sha256'][:12]} (HTTP {resp.status_code}): {message}", check)
        sub = resp.json()
    return sub


def state_file(run_dir: Path, wanted: dict[str, Any]) -> Path:
    """Where a state the service asks for lies in the run directory: the `path` it names (inside the run
    directory only), else an image trial's committed state (a service from before `path`)."""
    named = wanted.get("path")
    if isinstance(named, str) and named and not Path(named).is_absolute() and ".." not in Path(named).parts:
        return run_dir / named
    return run_dir / "trials" / wanted["trial"] / STATES / f"{wanted['sha256']}.safetensors"


def answer_challenge_later(service: Service, run_dir: Path, timeout: float, say: Say) -> dict[str, Any]:
    """The run's submission once its challenge is answered: wait for the verification (the challenge follows
    it), upload the challenged trials' weights, wait for the audit. Raises OSError, ValueError or KeyError on a
    run directory without a readable run.json."""
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    with client(service) as c:
        r = request(partial(c.get, "/api/v1/submissions/", params={"run_id": run_id}), "finding the submission",
                    3, 1.0, say)
        found = (r.json().get("results") or []) if r.status_code == 200 else []
        if not found:
            raise Failure(f"no submission of run {run_id} on {service.server}: submit it first")
        sub, deadline, pause = found[0], time.monotonic() + timeout, 0.5
        while sub["status"] not in DONE and time.monotonic() < deadline:  # the challenge follows verification
            time.sleep(pause)
            pause = min(pause * 1.5, 5.0)
            sub = request(partial(c.get, f"/api/v1/submissions/{sub['id']}/"), "checking the status", 3, 1.0,
                          say).json()
        if asks(sub) and sub["status"] in ("verified", "published"):
            sub = answer_challenge(c, run_dir, sub, say, deadline)
    return sub
