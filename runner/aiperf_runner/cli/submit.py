"""`aiperf-runner submit` and `aiperf-runner evidence`: a run to an AIPerf service, and its challenge answered.

- `submit RUN_DIR --server URL --token T` signs and packs the run (or takes a bundle as it is),
  uploads it with retries, waits until the service has verified it, and prints the status, the
  score the *service* computed, the rank and the result's URL (`--json`: one object).
- `evidence RUN_DIR` answers the service's challenge later: the challenged trials' weights.

The server and token come from the options, else $AIPERF_SERVER and $AIPERF_TOKEN, else what
`register` saved (aiperf_runner/client/service.py); the talking is aiperf_runner/client/submission.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from aiperf_runner.cli.exitcodes import FAILURE, TIMED_OUT
from aiperf_runner.cli.options import AsJson, Server, Token
from aiperf_runner.client.service import Failure, find_service
from aiperf_runner.client.submission import CHUNK_SIZE, answer_challenge_later, asks, say_to_stderr, submit_bundle
from aiperf_runner.spec.errors import AiperfError

EXIT_CODES = ("Exit codes: 0 verified, 1 rejected or refused (the message says why), 2 usage error, "
              "3 still not verified when --timeout ran out.")


def _summary(sub: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": sub.get("status"),
        "submission": sub.get("id"),
        "result": sub.get("result"),
        "run_id": sub.get("run_id"),
        "score_ops": sub.get("score_ops"),
        "regulated_score_ops": sub.get("regulated_score_ops"),
        "rank": sub.get("rank"),
        "rank_all": sub.get("rank_all"),
        "division": sub.get("division"),
        "standing": sub.get("standing"),
        "not_official_because": sub.get("not_official_because") or [],
        "verification_level": sub.get("verification_level"),
        "challenge": sub.get("challenge") or [],
        "evidence": sub.get("evidence") or [],
        "states": sub.get("states") or [],
        "states_received": sub.get("states_received") or [],
        "audit": sub.get("audit"),
        "audit_note": sub.get("audit_note") or "",
        "url": sub.get("url"),
        "reasons": sub.get("reasons") or [],
        "bundle": sub.get("bundle"),
        "sha256": sub.get("sha256"),
        "timed_out": bool(sub.get("timed_out")),
        "rehearsal": bool(sub.get("rehearsal")),
    }


def submit_cmd(
    run_dir: Annotated[Path, typer.Argument(help="The run directory (signed and packed here) or a bundle.",
                                            show_default=False)],
    server: Server = None,
    token: Token = None,
    key: Annotated[Path | None, typer.Option("--key", help="Private key file (default: the site key made "
                                             "by keygen).", show_default=False)] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the verification.")] = 600.0,
    retries: Annotated[int, typer.Option("--retries", min=0, help="Retries of a failed upload or poll.")] = 5,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Upload only; do not wait for the verification.")] = False,
    chunk_size: Annotated[float, typer.Option("--chunk-size", min=0, help="MiB: a bundle larger than this is "
                                              "uploaded in resumable chunks of this size (0: in one request).")]
    = CHUNK_SIZE / (1 << 20),
    rehearsal: Annotated[bool, typer.Option("--rehearsal", help="Submit a rehearsal (`run --rehearsal`): verified "
                                            "like an official run and shown to this site only, never ranked. A "
                                            "rehearsal's run needs it, any other run is refused with it.")] = False,
    as_json: AsJson = False,
) -> None:
    """Sign, pack and upload a run; wait for the service's verification; print score, rank and URL.

    A bundle larger than --chunk-size goes in chunks: a cut connection or a restart of the service resumes
    from the last byte the service holds, and so does this command run again with the same bundle.
    """
    try:
        service = find_service(server, token)
        assert service is not None
        if run_dir.is_dir():
            _complete_witness(run_dir, service, as_json)
        sub = submit_bundle(service, run_dir, key_path=key, wait=not no_wait, timeout=timeout,
                            retries=retries, quiet=as_json, chunk_size=int(chunk_size * (1 << 20)),
                            rehearsal=rehearsal)
    except Failure as exc:
        if not as_json:
            raise
        # --json: the refusal as the one object on stdout, in the shape of a submission
        typer.echo(json.dumps({"status": "refused", "score_ops": None, "rank": None, "url": None,
                               "reasons": [{"check": exc.check or "submit", "message": str(exc)}],
                               **exc.data}, indent=2))
        raise typer.Exit(FAILURE) from None
    data = _summary(sub)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        _print(data)
    if data["status"] in ("verified", "published"):
        return
    if data["status"] in ("rejected", "withdrawn"):
        raise typer.Exit(FAILURE)
    if not no_wait:
        raise typer.Exit(TIMED_OUT)


def _complete_witness(run_dir: Path, service: Any, quiet: bool) -> None:
    """A witnessed run whose end the service did not see gets its last heartbeat before it is packed."""
    from aiperf_runner.run.heartbeats import complete_witness

    note = complete_witness(run_dir, service)
    if note:
        say_to_stderr(quiet)(note)


def evidence_cmd(
    run_dir: Annotated[Path, typer.Argument(help="The run directory that was submitted.", show_default=False)],
    server: Server = None,
    token: Token = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the audit.")] = 600.0,
    as_json: AsJson = False,
) -> None:
    """Answer the service's challenge later: upload the challenged trials' weights, wait for the audit."""
    service = find_service(server, token)
    assert service is not None
    try:
        sub = answer_challenge_later(service, run_dir, timeout, say_to_stderr(as_json))
    except (OSError, ValueError, KeyError) as exc:  # run.json missing or unreadable
        raise AiperfError(str(exc)) from None
    data = _summary(sub)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    elif not asks(data):
        typer.echo(f"submission {data['submission']} ({data['status']}): no challenge to answer "
                   "(an unwitnessed run, or not verified)")
    else:
        typer.echo(f"submission {data['submission']}: audit {_audit_line(data)}"
                   + (f"; {data['audit_note']}" if data["audit_note"] else ""))
    if data["audit"] == "failed" or data["status"] == "rejected":
        raise typer.Exit(FAILURE)


def _audit_line(d: dict[str, Any]) -> str:
    """The audit's state and what it was asked to check: challenged trials' weights, committed states."""
    asked = []
    if d["challenge"]:
        asked.append(f"challenged trials {', '.join(d['challenge'])}")
    if d["states"]:
        asked.append(f"{len(d['states'])} training state(s)")
    return f"{d.get('audit') or '-'} ({'; '.join(asked)})"


def _print(d: dict[str, Any]) -> None:
    lines = [f"submission {d['submission']}: {d['status']}"]
    if d["score_ops"] is not None:
        lines.append(f"score:        {d['score_ops']:.6g} OPS (regulated {d['regulated_score_ops']:.6g} OPS)")
        standing = d.get("standing") or {}
        if d["rank"]:
            rank = f"{d['rank']} in the {d['division']} division"
        elif standing.get("state") == "live_not_best":
            rank = f"{d.get('rank_all')} among every {d['division']} result (not its system's best: the list shows that)"
        else:
            rank = f"not ranked ({d['division']} division): {standing.get('text') or 'not on the live list'}"
        if d["rehearsal"]:
            rank = f"none: a rehearsal (verified as the {d['division']} division would be; shown to this site " \
                   "only, never ranked)"
        lines.append(f"rank:         {rank}")
        lines.append(f"verification: {d['verification_level']}")
        because = d.get("not_official_because") or []
        if because and not d["rehearsal"]:
            lines.append("not official because:")
            lines += [f"  {r['check']}: {r['message']}" for r in because[:8]]
            if len(because) > 8:
                lines.append(f"  ... and {len(because) - 8} more (the result page lists every check)")
    if asks(d):  # a run with no kept weights is audited on its states alone
        lines.append(f"audit:        {_audit_line(d)}")
        if d.get("audit_note"):
            lines.append(f"              {d['audit_note']}")
    if d.get("states"):
        llm = any(str(w.get("path", "")).endswith(("/weights.safetensors", "/optimizer.safetensors"))
                  for w in d["states"])
        what = ("trial states asked for uploaded (their trials trained again by the audit)" if llm else
                "committed states asked for uploaded (their segments re-executed by the audit)")
        lines.append(f"work:         {len(d['states_received'])} of {len(d['states'])} {what}")
    if d["url"]:
        lines.append(f"result:       {d['url']}")
    for r in d["reasons"]:
        lines.append(f"  {r.get('check')}: {r.get('message')}")
    if d["timed_out"]:
        lines.append("still being verified; run the same command again later to see the outcome")
    typer.echo("\n".join(lines), file=sys.stdout)


def register(app: typer.Typer) -> None:
    app.command("submit", epilog=EXIT_CODES)(submit_cmd)
    app.command("evidence", epilog="Exit codes: 0 audited or still pending, 1 failed or refused.")(evidence_cmd)
