"""One receipt chain per token (docs/service.md, "Witnessed runs"): every heartbeat names the last receipt
issued for its run; one that does not is refused and counted, so a beacon cannot be read, thrown away and
asked for again, and a second log cannot take turns under the token. A retry of an answered heartbeat gets
the same receipt; the receipts a run's records hold are what verification demands of the log."""

from __future__ import annotations

from typing import Any

import pytest
from aiperf_runner.spec import witness as spec_witness

from leaderboard import witness
from leaderboard.errors import Rejected
from leaderboard.models import Heartbeat, RunAttempt, System
from tests.service.conftest import SiteFixture, new_site

pytestmark = pytest.mark.django_db

FIELDS = {"preset": "smoke", "rules": "v2", "precision": "fp32", "slots": 1, "devices_per_slot": 1,
          "duration_s": 60.0, "runner_version": "test"}
LOG_ID = "1f" * 32


@pytest.fixture
def run(settings, tmp_path, transactional_db) -> tuple[SiteFixture, RunAttempt]:
    settings.AIPERF_WITNESS_KEY_FILE = str(tmp_path / "witness_key.pem")
    witness.create_key()
    site = new_site("Chained", "NL")
    system = System.objects.create(site=site.site, accelerator_model="cpu", identity="c", registered=True)
    return site, witness.issue_token(site.site, system, FIELDS)


def beat(site: SiteFixture, attempt: RunAttempt, seq: int, previous: str | None, head: str | None = None,
         **over: Any) -> tuple[Heartbeat, bool]:
    statement = {"kind": spec_witness.HEARTBEAT_KIND, "run_id": attempt.run_id, "heartbeat_seq": seq,
                 "head": head or f"{seq:064x}", "log_id": LOG_ID, "work": 1.0, "epochs": seq, "best_accuracy": None,
                 "sent_at": 0.0, "previous_receipt": previous, **over}
    return witness.receive_heartbeat(site.site, attempt.run_id,
                                     {"statement": statement, "signature": spec_witness.sign(site.key, statement)})


def test_each_receipt_names_the_one_before_it(run) -> None:
    site, attempt = run
    first, new = beat(site, attempt, 3, None)
    assert new and first.receipt()["previous_receipt"] is None
    digest = spec_witness.receipt_digest(first.receipt())
    assert first.digest == digest
    second, _ = beat(site, attempt, 9, digest)
    assert second.receipt()["previous_receipt"] == digest
    # The signature covers the chain: a receipt verifies as the log will hold it.
    keys = witness.public_keys()
    receipt = second.receipt()
    assert spec_witness.signature_problem(spec_witness.receipt_statement(receipt), receipt["signature"], keys) is None


def test_a_heartbeat_that_skips_a_receipt_is_refused_and_recorded(run) -> None:
    """The beacon ground: heartbeat 3's receipt read and thrown away, heartbeat 5 sent as if it never came."""
    site, attempt = run
    beat(site, attempt, 3, None)
    with pytest.raises(Rejected) as refused:
        beat(site, attempt, 5, None)
    assert refused.value.status == 409 and refused.value.check == "heartbeat"
    assert "does not name the last receipt" in refused.value.detail and "recorded" in refused.value.detail
    attempt.refresh_from_db()
    assert attempt.chain_breaks == 1 and attempt.receipts.count() == 1
    records, _ = witness.records(attempt.run_id, site.site, None)
    assert any("not following the last receipt" in p for p in records.token_problems)


def test_a_second_log_taking_turns_is_refused(run) -> None:
    """Two logs with the same first line (the same log id) under one token, each naming its own last receipt."""
    site, attempt = run
    a0, _ = beat(site, attempt, 2, None, head="a" * 64)
    with pytest.raises(Rejected):
        beat(site, attempt, 3, None, head="b" * 64)  # the second log's first heartbeat
    beat(site, attempt, 4, a0.digest, head="c" * 64)  # the first log goes on
    attempt.refresh_from_db()
    assert attempt.chain_breaks == 1


def test_a_second_log_behind_the_first_is_refused_and_recorded(run) -> None:
    """A second log's heartbeat at a position the first log passed (its own numbering) is refused on the record
    too, even when it names the last receipt."""
    site, attempt = run
    first, _ = beat(site, attempt, 40, None)
    with pytest.raises(Rejected) as refused:
        beat(site, attempt, 7, first.digest)
    assert "goes backwards" in refused.value.detail
    attempt.refresh_from_db()
    assert attempt.chain_breaks == 1


def test_a_retry_of_an_answered_heartbeat_gets_the_same_receipt(run) -> None:
    site, attempt = run
    first, _ = beat(site, attempt, 3, None)
    again, new = beat(site, attempt, 3, None)  # its answer was lost: sent again as it was
    assert not new and again.pk == first.pk
    attempt.refresh_from_db()
    assert attempt.chain_breaks == 0


def test_a_heartbeat_without_the_field_is_refused_as_malformed(run) -> None:
    site, attempt = run
    statement = {"kind": spec_witness.HEARTBEAT_KIND, "run_id": attempt.run_id, "heartbeat_seq": 1, "head": "0" * 64,
                 "log_id": LOG_ID, "work": 1.0, "epochs": 0}
    with pytest.raises(Rejected) as refused:
        witness.receive_heartbeat(site.site, attempt.run_id,
                                  {"statement": statement, "signature": spec_witness.sign(site.key, statement)})
    assert refused.value.status == 400 and "previous_receipt" in refused.value.detail


def test_receipts_issued_before_the_chain_keep_their_signed_form(run) -> None:
    """A receipt from before receipts were chained (no previous_receipt in what was signed) is served as
    signed, and the next heartbeat chains from its digest."""
    site, attempt = run
    old = {"kind": spec_witness.RECEIPT_KIND, "run_id": attempt.run_id, "heartbeat_seq": 1, "head": "0" * 64,
           "received_at": 1.0, "beacon": "e" * 64, "key": witness.fingerprint()}
    Heartbeat.objects.create(attempt=attempt, heartbeat_seq=1, head=old["head"], received_at=1.0, beacon=old["beacon"],
                             key=old["key"], signature=spec_witness.sign(witness.private_key(), old),
                             digest=spec_witness.receipt_digest(old))
    served = Heartbeat.objects.get(attempt=attempt, heartbeat_seq=1).receipt()
    assert "previous_receipt" not in served
    assert spec_witness.signature_problem(spec_witness.receipt_statement(served), served["signature"],
                                          witness.public_keys()) is None
    nxt, _ = beat(site, attempt, 4, spec_witness.receipt_digest(served))
    assert nxt.previous_receipt == spec_witness.receipt_digest(old)
