"""`aiperf-runner verify RUN_DIR|BUNDLE`: integrity, recomputed score and the rules (torch-free)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from aiperf_runner.cli.exitcodes import FAILURE, SUCCESS, UsageError
from aiperf_runner.rundir import recorded


def _num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
            return f"{v:.4g}"
        return f"{v:.4f}".rstrip("0").rstrip(".")
    if isinstance(v, (list, tuple)):
        return ", ".join(_num(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k} {_num(x)}" for k, x in v.items())
    return str(v)


def _print_human(report: dict[str, Any], judged: str = "") -> None:
    from rich.console import Console
    from rich.table import Table

    from aiperf_runner.spec.rules import BLOCKING

    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=140)
    ok = report["integrity_ok"]
    console.print(f"[bold]run[/bold] {report['run_id'] or '-'}   rules {report['rules']} "
                  f"(rules version {report['rules_version']}, spec {report['spec_version']})")
    console.print(f"signed by       {report['fingerprint'] or 'not signed'}")
    console.print(f"score           {report['score_ops']:.6g} OPS")
    console.print(f"regulated score {report['regulated_score_ops']:.6g} OPS")
    if report.get("workload") == "llm":
        best = report.get("best_loss")
        console.print(f"best val loss   {best:.4f} nats (trial {report.get('best_trial')}); {report['tokens_trained']:,} "
                      f"tokens trained; morphisms {', '.join(report['morphisms_used']) or 'none'}"
                      if best is not None else "best val loss   -")
    else:
        console.print(f"max accuracy    {report['max_accuracy']:.4f}")
    console.print(f"duration        {report['duration_s']:.1f} s   trials finished {report['trials_finished']}   "
                  f"epochs {report['epochs']}")
    console.print(f"division        {report['division']}   valid {_num(report['valid'])}   "
                  f"stable {_num(report['stable'])}   plausible {_num(report['plausible'])}")
    console.print(f"hardware        {(report.get('system') or {}).get('describe') or '-'}")
    if judged:
        console.print(f"records         {judged}")
    table = Table(show_lines=False, header_style="bold")
    table.add_column("check", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("measured", overflow="fold")
    table.add_column("threshold", overflow="fold")
    table.add_column("message", overflow="fold")
    for c in report["checks"]:
        result = "[green]pass[/green]" if c["passed"] else "[red]FAIL[/red]"
        table.add_row(c["name"], result, _num(c["measured"]), _num(c["threshold"]), c["message"])
    console.print(table)
    console.print("[green]integrity OK[/green]" if ok else "[red]integrity FAILED[/red]")
    if report.get("rejected"):
        names = ", ".join(c["name"] for c in report["checks"] if not c["passed"] and c["name"].startswith(BLOCKING))
        console.print(f"[red]the service would reject this run[/red] ({names})")


def verify(
    path: Annotated[Path, typer.Argument(metavar="RUN_DIR|BUNDLE", show_default=False,
                                         help="A run directory or a bundle (.tar.gz) made by `pack`.")],
    pubkey: Annotated[Path | None, typer.Option("--pubkey", metavar="FILE", show_default=False,
                                                help="Public key file (site_key.pub) the run must be signed with.")] = None,
    rules: Annotated[str | None, typer.Option("--rules", metavar="v1-compat|v2", show_default=False,
                                              help="FLOP rules to score with (default: the run's own).")] = None,
    rules_version: Annotated[str | None, typer.Option(
        "--rules-version", metavar="VERSION", show_default=False,
        help="The rules version to check under (default: the one the run declares; a spec 1 log's is told from "
             "what its runner wrote).")] = None,
    require_signature: Annotated[bool, typer.Option("--require-signature",
                                                    help="Fail integrity if the run is not signed.")] = False,
    system: Annotated[Path | None, typer.Option(
        "--system", metavar="FILE", show_default=False,
        help="The system's registration as JSON (one object of `aiperf-runner system list --json`): the "
             "hardware and peak the run is judged by. Without it, a run directory's own record of its registration "
             "(run.json, kept by `run --system`) stands in, else the run's own facts and system.registered "
             "fails.")] = None,
    witness_key: Annotated[list[Path] | None, typer.Option(
        "--witness-key", metavar="FILE", show_default=False,
        help="A public key of the service's witness (a line `aiperf-ed25519 <base64>`, or the base64 alone; "
             "repeatable: retired keys still verify their receipts). Without it, the key the service named with "
             "a run directory's token (local/witness.json) stands in, else the witness.* checks cannot be "
             "made.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verification report as JSON.")] = False,
) -> None:
    """Verify a run: hash chain, signature and manifest, schema; recompute FLOPs and the score; check the rules.

    Prints a summary and a table of every check (threshold, measured value, outcome), or with --json the full report (what the AIPerf service stores). FLOPs are recomputed from each trial's graph.json, never read from the log.

    Exit codes: 0 integrity OK (whatever the division and the other checks), 1 integrity failed (hash chain, signature, manifest, schema, versions, graphs or bound rules), 2 usage error (missing path, unknown --rules or --rules-version, unreadable --pubkey or --system).
    """
    from aiperf_runner.spec import keys
    from aiperf_runner.spec.rules import THRESHOLDS
    from aiperf_runner.spec.scoring import RULES
    from aiperf_runner.spec.verify import verify as run_verify

    if rules is not None and rules not in RULES:
        raise UsageError(f"unknown --rules {rules!r} (expected {' or '.join(RULES)})")
    if rules_version is not None and rules_version not in THRESHOLDS:
        raise UsageError(f"unknown --rules-version {rules_version!r} (known: {', '.join(THRESHOLDS)})")
    if not path.exists():
        raise UsageError(f"{path} does not exist")
    if path.is_dir() and not (path / "run.json").exists() and not (path / "events.jsonl").exists():
        raise UsageError(f"{path} is not a run directory (no run.json, no events.jsonl)")
    key = None
    if pubkey is not None:
        try:
            key = keys.load_public_key(pubkey)
        except (ValueError, OSError) as exc:
            raise UsageError(f"--pubkey {pubkey}: {exc}") from None
    witness_keys = None
    if witness_key:
        witness_keys = {}
        for path_ in witness_key:
            try:
                public = keys.load_public_key(path_)
            except (ValueError, OSError) as exc:
                raise UsageError(f"--witness-key {path_}: {exc}") from None
            witness_keys[keys.fingerprint(public)] = keys.public_bytes(public)
    registration = None
    if system is not None:
        try:
            registration = json.loads(system.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"--system {system}: {exc}") from None
        if not isinstance(registration, dict):
            raise UsageError(f"--system {system}: expected one JSON object (a registered system)")
    judged = ""
    if path.is_dir() and (registration is None or witness_keys is None):
        # A run directory keeps what the service said at the run's start: judge by it unless told otherwise.
        kept_system, kept_witness = recorded.judged_against(path)
        registration = registration if registration is not None else kept_system
        witness_keys = witness_keys if witness_keys is not None else kept_witness
        judged = recorded.describe(kept_system if system is None else None, kept_witness if not witness_key else None)
    try:
        report = run_verify(path, pubkey=key, rules=rules, rules_version=rules_version,
                            require_signature=require_signature, system=registration,
                            witness_keys=witness_keys)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if as_json:
        typer.echo(json.dumps(report, indent=2, allow_nan=False))
    else:
        _print_human(report, judged)
    raise typer.Exit(SUCCESS if report["integrity_ok"] else FAILURE)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
