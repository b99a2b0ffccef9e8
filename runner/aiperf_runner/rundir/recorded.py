"""What a site's own check of its run (`verify DIR`, `report`, the summary after `run`) judges it against where the
service judges by its own records: the registration run.json recorded at the run's start (`run --system`: the
service's record of the system then) and the witness key the service named when it issued the run's token (kept in
local/witness.json, which no bundle holds). Without them a registered, witnessed run reads `system.registered` and
`witness.*` failed or unchecked on the site although the service passes them. The service never reads either."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiperf_runner.rundir.privacy import local_dir, write_local
from aiperf_runner.spec import keys

WITNESS_FILE = "witness.json"


def record_witness(run_dir: str | Path, answer: Mapping[str, Any]) -> None:
    """Keep the witness key of a run token's answer (`witness`: {fingerprint, public_key}); an answer without one
    (an older service) keeps nothing."""
    witness = answer.get("witness")
    if not isinstance(witness, Mapping) or not witness.get("public_key") or not witness.get("fingerprint"):
        return
    write_local(run_dir, WITNESS_FILE, {"fingerprint": str(witness["fingerprint"]),
                                        "public_key": str(witness["public_key"])})


def witness_keys(run_dir: str | Path) -> dict[str, bytes] | None:
    """{fingerprint: raw public key} of the witness key recorded with the run's token, or None (none recorded, or
    a record whose key does not have its fingerprint)."""
    try:
        data = json.loads((local_dir(run_dir) / WITNESS_FILE).read_text())
        raw = base64.b64decode(str(data["public_key"]), validate=True)
        fingerprint = keys.fingerprint(raw)
    except (OSError, ValueError, KeyError, TypeError, binascii.Error):
        return None
    return {fingerprint: raw} if fingerprint == data.get("fingerprint") else None


def registration(run_json: Mapping[str, Any]) -> dict[str, Any] | None:
    """The service's record of the run's system as run.json kept it at the run's start, or None (an unregistered
    run)."""
    system = run_json.get("system")
    recorded = system.get("registration") if isinstance(system, Mapping) else None
    return dict(recorded) if isinstance(recorded, Mapping) and recorded.get("id") is not None else None


def judged_against(run_dir: str | Path) -> tuple[dict[str, Any] | None, dict[str, bytes] | None]:
    """(registration, witness keys) recorded in a run directory, each None where there is none."""
    try:
        run_json = json.loads((Path(run_dir) / "run.json").read_text())
    except (OSError, ValueError):
        run_json = {}
    return registration(run_json if isinstance(run_json, dict) else {}), witness_keys(run_dir)


def describe(system: Mapping[str, Any] | None, witness: Mapping[str, bytes] | None) -> str:
    """One line on what a local verification used of the run's records ('' for nothing)."""
    parts = []
    if system is not None:
        parts.append(f"system {system.get('id')}'s registration as run.json recorded it at the run's start "
                     f"({system.get('status') or 'status unknown'} then)")
    if witness:
        parts.append(f"the witness key the service named with the run's token ({', '.join(witness)})")
    return ("judged against " + " and ".join(parts) + "; the service judges by its own records") if parts else ""
