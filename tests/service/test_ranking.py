"""Stored ranks (leaderboard/ranking.py): by score within a division and FLOP rules, ties shared, NULL off the
live list, kept current by every change the service makes to the list, copied by a freeze; `rank_all`
ranks every result, `rank` each system's best among the systems' best."""

from __future__ import annotations

import itertools

import pytest

from leaderboard import pipeline, ranking
from leaderboard.models import Edition, Result, Site, Submission, System

pytestmark = pytest.mark.django_db

_ids = itertools.count()


def result(site: Site, system: System, division: str, score: float, *, published: bool = True,
           status: str = Submission.Status.VERIFIED, rules: str = "v2", review: str = "") -> Result:
    n = next(_ids)
    sub = Submission.objects.create(site=site, sha256=f"{n:064x}", size=1, run_id=f"{n:032x}", status=status)
    return Result.objects.create(submission=sub, site=site, system=system, run_id=sub.run_id, division=division,
                                 score_ops=score, regulated_score_ops=score, max_accuracy=0.5, duration_s=1.0,
                                 rules_version="1.0", verifier_version="test", verification_level="full",
                                 report={}, published=published, rules=rules, review=review)


@pytest.fixture
def site_system() -> tuple[Site, System]:
    site = Site(name="Ranked", country="DE")
    site.save()
    return site, System.objects.create(site=site, accelerator_model="cpu", identity="x")


def ranks(*results: Result, field: str = "rank_all") -> list[int | None]:
    return [getattr(Result.objects.get(pk=r.pk), field) for r in results]


def test_by_score_within_a_division_ties_share_a_rank(site_system):
    a, b, c, d = (result(*site_system, "official", s) for s in (10.0, 8.0, 8.0, 5.0))
    o1, o2 = (result(*site_system, "open", s) for s in (1.0, 20.0))
    ranking.rerank()
    assert ranks(a, b, c, d) == [1, 2, 2, 4]
    assert ranks(o1, o2) == [2, 1]
    assert ranking.live_ranks(all_results=True) == {
        r.pk: rank for r, rank in zip((a, b, c, d, o1, o2), (1, 2, 2, 4, 2, 1), strict=True)}


def test_off_the_live_list_is_null_and_the_rest_close_up(site_system):
    top = result(*site_system, "official", 10.0)
    hidden = result(*site_system, "official", 9.0, published=False)
    gone = result(*site_system, "official", 8.0, status=Submission.Status.WITHDRAWN)
    last = result(*site_system, "official", 7.0)
    ranking.rerank()
    assert ranks(top, hidden, gone, last) == [1, None, None, 2]
    assert pipeline.withdraw(top.submission)  # the service's own change re-ranks
    assert ranks(top, last) == [None, 1]
    Result.objects.filter(pk=hidden.pk).update(published=True)
    assert pipeline.publish(hidden.submission)
    assert ranks(hidden, last) == [1, 2]


def test_rerank_writes_only_what_changed(site_system):
    rs = [result(*site_system, "open", s) for s in (3.0, 2.0, 1.0)]
    assert ranking.rerank() == 3 + 1  # three rank_all, one rank (the system's best)
    assert ranking.rerank() == 0
    Result.objects.filter(pk=rs[2].pk).update(score_ops=4.0)  # the last one moves to the top: all three move
    assert ranking.rerank() == 3 + 2 and ranks(*rs) == [2, 3, 1]  # and the system's best changes
    assert ranks(*rs, field="rank") == [None, None, 1]
    Result.objects.filter(pk=rs[0].pk).update(published=False)
    assert ranking.rerank() == 2 and ranks(*rs) == [None, 2, 1]


def test_freeze_copies_the_stored_ranks(site_system):
    rs = [result(*site_system, "official", s) for s in (5.0, 5.0, 1.0)]
    ranking.rerank()
    edition = Edition.objects.create(name="2026-06")
    assert ranking.freeze_edition(edition) == 3
    assert ranking.edition_ranks(edition) == {rs[0].pk: 1}  # one entry per system: its best
    assert dict(edition.entries.values_list("result_id", "rank_all")) == {
        r.pk: rank for r, rank in zip(rs, (1, 1, 3), strict=True)}
    with pytest.raises(ValueError, match="already frozen"):
        ranking.freeze_edition(edition)


def test_one_entry_per_system_and_v1_compat_apart(site_system):
    site, first = site_system
    second = System.objects.create(site=site, accelerator_model="cpu", identity="y")
    a1, a2 = result(site, first, "official", 9.0), result(site, first, "official", 7.0)
    b1 = result(site, second, "official", 8.0)
    v1 = result(site, second, "open", 100.0, rules="v1-compat")
    waiting = result(site, second, "official", 50.0, review=Result.Review.PENDING)
    ranking.rerank()
    assert ranks(a1, a2, b1, field="rank") == [1, None, 2]  # the default list: each system's best
    assert ranks(a1, a2, b1) == [1, 3, 2]  # every result
    assert ranks(v1) == [1] and ranks(v1, field="rank") == [1]  # its own list
    assert ranks(waiting) == [None]  # off the list until a maintainer approves it
    pipeline.review(waiting, True, "checked the machine's datasheet", "maintainer")
    assert ranks(waiting, field="rank") == [1] and ranks(b1, field="rank") == [None]
