"""`aiperf-runner register` and `aiperf-runner submit`: talking to an AIPerf service.

- `register --server URL --token T` uploads the site's public key (site_key.pub from keygen).
- `submit RUN_DIR --server URL --token T` signs and packs the run (or takes a bundle as it is),
  uploads it with retries, waits until the service has verified it, and prints the status, the
  score the *service* computed, the rank and the result's URL (`--json`: one object).

The server and token come from the options, else $AIPERF_SERVER and $AIPERF_TOKEN, else what
`register` saved (aiperf_runner/service.py).
"""

from __future__ import annotations

import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from aiperf_runner import chunked
from aiperf_runner.publish import write_public_logs
from aiperf_runner.service import Failure, Service, client, detail, find_service, request, save_service
from aiperf_runner.spec import bundle, keys
from aiperf_runner.spec.retention import WEIGHTS

if TYPE_CHECKING:
    import httpx  # imported when a command talks to a server: `aiperf-runner` starts faster

EXIT_CODES = ("Exit codes: 0 verified, 1 rejected or refused (the message says why), 2 usage error, "
              "3 still not verified when --timeout ran out.")
DONE = ("verified", "published", "rejected", "withdrawn")
CHUNK_SIZE = 64 << 20  # bundles larger than this go in resumable chunks of this size

Server = Annotated[str | None, typer.Option("--server", help="The service's base URL, e.g. https://aiperf.example.org "
                                            "(default: $AIPERF_SERVER, else what `register` saved).",
                                            show_default=False)]
Token = Annotated[str | None, typer.Option("--token", help="The site's API token (default: $AIPERF_TOKEN, else "
                                           "what `register` saved).", show_default=False)]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")]


def _say(quiet: bool):
    return (lambda message: None) if quiet else (lambda message: typer.echo(message, err=True))


# ---- register ----------------------------------------------------------------------------------
def register_key(service: Service, public_key: Path | None = None, label: str = "",
                 retries: int = 3) -> dict[str, Any]:
    """Upload the site's public key; the service's answer plus `created`."""
    key = keys.load_public_key(public_key)
    with client(service) as c:
        resp = request(lambda: c.post("/api/v1/keys/", json={"public_key": keys.public_line(key), "label": label}),
                       "registering the key", retries, 1.0, _say(True))
    if resp.status_code in (200, 201):
        return {**resp.json(), "created": resp.status_code == 201}
    message, check = detail(resp)
    raise Failure(f"the service refused the key (HTTP {resp.status_code}): {message}", check)


def register_cmd(
    server: Server,
    token: Token,
    pubkey: Annotated[Path | None, typer.Option("--pubkey", help="Public key file (default: site_key.pub "
                                                "in the config directory).", show_default=False)] = None,
    label: Annotated[str, typer.Option("--label", help="A note shown with the key.")] = "",
    as_json: AsJson = False,
) -> None:
    """Register the site's public key with an AIPerf service (uses the site's API token).

    The server and token are saved (service.json in the config directory, mode 0600) for the
    commands that talk to the service later: `system`, `run --system`, `submit`.
    """
    try:
        service = find_service(server, token)
        assert service is not None
        data = register_key(service, pubkey, label)
    except (keys.KeyFileError, Failure) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    data["service_file"] = str(save_service(service.server, service.token))
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        state = "registered" if data["created"] else "already registered"
        typer.echo(f"{data['fingerprint']} {state} for site {data['site']['name']}")


# ---- submit ------------------------------------------------------------------------------------
def _bundle_for(path: Path, key_path: Path | None, say) -> Path:
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
                  quiet: bool = False, chunk_size: int = CHUNK_SIZE) -> dict[str, Any]:
    """Upload and (optionally) wait; return the submission as the service last described it.

    A bundle larger than `chunk_size` bytes goes in resumable chunks (aiperf_runner/chunked.py); a smaller
    one, or any with `chunk_size` 0, in one request.
    """
    say = _say(quiet)
    if path.is_dir():
        from aiperf_runner.witnessing import complete_witness

        note = complete_witness(path, service)
        if note:
            say(note)
    try:
        out = _bundle_for(path, key_path, say)
    except (keys.KeyFileError, bundle.BundleError) as exc:
        raise Failure(str(exc)) from None
    size = out.stat().st_size
    say(f"uploading {out.name} ({size / 1e6:.1f} MB) to {service.server}")

    with client(service, timeout=max(60.0, size / 1e6)) as c:
        def send() -> httpx.Response:
            with open(out, "rb") as fh:
                return c.post("/api/v1/submissions/", files={"bundle": (out.name, fh, "application/gzip")})

        if chunk_size and size > chunk_size:
            resp = chunked.upload(c, service.server, out, chunk_size, retries, backoff, say)
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
        if wait and path.is_dir() and sub.get("challenge") and sub["status"] in ("verified", "published"):
            sub = {**answer_challenge(c, path, sub, say, deadline, retries, backoff), "bundle": str(out)}
    return sub


def answer_challenge(c: httpx.Client, run_dir: Path, sub: dict[str, Any], say: Any, deadline: float,
                     retries: int = 5, backoff: float = 2.0) -> dict[str, Any]:
    """Upload the weights of every challenged trial not uploaded yet, then wait for the audit."""
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


def _summary(sub: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": sub.get("status"),
        "submission": sub.get("id"),
        "result": sub.get("result"),
        "run_id": sub.get("run_id"),
        "score_ops": sub.get("score_ops"),
        "regulated_score_ops": sub.get("regulated_score_ops"),
        "rank": sub.get("rank"),
        "division": sub.get("division"),
        "verification_level": sub.get("verification_level"),
        "challenge": sub.get("challenge") or [],
        "evidence": sub.get("evidence") or [],
        "audit": sub.get("audit"),
        "audit_note": sub.get("audit_note") or "",
        "url": sub.get("url"),
        "reasons": sub.get("reasons") or [],
        "bundle": sub.get("bundle"),
        "sha256": sub.get("sha256"),
        "timed_out": bool(sub.get("timed_out")),
    }


def submit_cmd(
    run_dir: Annotated[Path, typer.Argument(help="The run directory (signed and packed here) or a bundle.",
                                            show_default=False)],
    server: Server,
    token: Token,
    key: Annotated[Path | None, typer.Option("--key", help="Private key file (default: the site key made "
                                             "by keygen).", show_default=False)] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the verification.")] = 600.0,
    retries: Annotated[int, typer.Option("--retries", min=0, help="Retries of a failed upload or poll.")] = 5,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Upload only; do not wait for the verification.")] = False,
    chunk_size: Annotated[float, typer.Option("--chunk-size", min=0, help="MiB: a bundle larger than this is "
                                              "uploaded in resumable chunks of this size (0: in one request).")]
    = CHUNK_SIZE / (1 << 20),
    as_json: AsJson = False,
) -> None:
    """Sign, pack and upload a run; wait for the service's verification; print score, rank and URL.

    A bundle larger than --chunk-size goes in chunks: a cut connection or a restart of the service resumes
    from the last byte the service holds, and so does this command run again with the same bundle.
    """
    try:
        service = find_service(server, token)
        assert service is not None
        sub = submit_bundle(service, run_dir, key_path=key, wait=not no_wait, timeout=timeout,
                            retries=retries, quiet=as_json, chunk_size=int(chunk_size * (1 << 20)))
    except Failure as exc:
        if as_json:
            typer.echo(json.dumps({"status": "refused", "score_ops": None, "rank": None, "url": None,
                                   "reasons": [{"check": exc.check or "submit", "message": str(exc)}],
                                   **exc.data}, indent=2))
        else:
            typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    data = _summary(sub)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        _print(data)
    if data["status"] in ("verified", "published"):
        return
    if data["status"] in ("rejected", "withdrawn"):
        raise typer.Exit(1)
    if not no_wait:
        raise typer.Exit(3)


def evidence_cmd(
    run_dir: Annotated[Path, typer.Argument(help="The run directory that was submitted.", show_default=False)],
    server: Server = None,
    token: Token = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the audit.")] = 600.0,
    as_json: AsJson = False,
) -> None:
    """Answer the service's challenge later: upload the challenged trials' weights, wait for the audit."""
    say = _say(as_json)
    try:
        service = find_service(server, token)
        assert service is not None
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
            if sub.get("challenge") and sub["status"] in ("verified", "published"):
                sub = answer_challenge(c, run_dir, sub, say, deadline)
    except (Failure, OSError, ValueError, KeyError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    data = _summary(sub)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    elif not data["challenge"]:
        typer.echo(f"submission {data['submission']} ({data['status']}): no challenge to answer "
                   "(an unwitnessed run, or not verified)")
    else:
        typer.echo(f"submission {data['submission']}: audit {data['audit'] or '-'} (challenged trials "
                   f"{', '.join(data['challenge'])})" + (f"; {data['audit_note']}" if data["audit_note"] else ""))
    if data["audit"] == "failed" or data["status"] == "rejected":
        raise typer.Exit(1)


def _print(d: dict[str, Any]) -> None:
    lines = [f"submission {d['submission']}: {d['status']}"]
    if d["score_ops"] is not None:
        lines.append(f"score:        {d['score_ops']:.6g} OPS (regulated {d['regulated_score_ops']:.6g} OPS)")
        rank = f"{d['rank']} in the {d['division']} division" if d["rank"] else \
            f"not ranked yet ({d['division']} division; awaiting publication)"
        lines.append(f"rank:         {rank}")
        lines.append(f"verification: {d['verification_level']}")
    if d.get("challenge"):
        lines.append(f"audit:        {d.get('audit') or '-'} (challenged trials {', '.join(d['challenge'])})")
        if d.get("audit_note"):
            lines.append(f"              {d['audit_note']}")
    if d["url"]:
        lines.append(f"result:       {d['url']}")
    for r in d["reasons"]:
        lines.append(f"  {r.get('check')}: {r.get('message')}")
    if d["timed_out"]:
        lines.append("still being verified; run the same command again later to see the outcome")
    typer.echo("\n".join(lines), file=sys.stdout)


def register(app: typer.Typer) -> None:
    app.command("register", epilog="Exit codes: 0 registered, 1 refused or failed, 2 usage error.")(register_cmd)
    app.command("submit", epilog=EXIT_CODES)(submit_cmd)
    app.command("evidence", epilog="Exit codes: 0 audited or still pending, 1 failed or refused.")(evidence_cmd)
