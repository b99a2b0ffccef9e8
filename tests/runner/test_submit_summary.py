"""What `aiperf-runner submit` prints about the audit: its state whenever the service asked for anything, weights
of challenged trials or committed states alone (a run stopped before any trial kept weights)."""

from __future__ import annotations

from typing import Any

import pytest
from aiperf_runner.cli.submit import _print, _summary


def submission(**fields: Any) -> dict[str, Any]:
    return {"id": 7, "status": "verified", "score_ops": 2.5e8, "regulated_score_ops": 4.4e8, "rank": 1,
            "division": "open", "verification_level": "partial", "url": "http://list/results/7", **fields}


def printed(capsys: pytest.CaptureFixture[str], sub: dict[str, Any]) -> str:
    _print(_summary(sub))
    return capsys.readouterr().out


def test_an_audit_of_states_alone_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    states = [{"trial": "t0", "sha256": "a" * 64}, {"trial": "t0", "sha256": "b" * 64}]
    out = printed(capsys, submission(audit="passed", states=states, states_received=["a" * 64, "b" * 64]))
    assert "audit:        passed (2 training state(s))" in out
    assert "work:         2 of 2 committed states" in out


def test_an_audit_of_weights_and_states_names_both(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, submission(audit="pending", challenge=["t1", "t3"], states=[{"trial": "t1", "sha256": "c"}]))
    assert "audit:        pending (challenged trials t1, t3; 1 training state(s))" in out


def test_no_audit_line_when_nothing_was_asked(capsys: pytest.CaptureFixture[str]) -> None:
    assert "audit:" not in printed(capsys, submission(audit="none"))
