"""`manage.py aiperf_demo_data`: generated, marked, consistent, replaceable, refused in production."""

from __future__ import annotations

import io

import pytest
from aiperf_runner.spec import scoring
from aiperf_runner.spec.rules import official, thresholds
from django.core.management import CommandError, call_command

from devdata import demo
from leaderboard.models import Edition, EditionEntry, Result, ResultSeries, Site, Submission, System, Trial

pytestmark = pytest.mark.django_db


def test_refused_when_debug_is_off_unless_forced(settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="--force"):
        call_command("aiperf_demo_data", results=3)
    assert not Result.objects.exists()
    out = io.StringIO()
    call_command("aiperf_demo_data", results=3, force=True, stdout=out)
    assert "3 results" in out.getvalue()
    assert Result.objects.count() == 3


def test_generates_n_marked_results_with_everything(settings):
    settings.DEBUG = True
    out = io.StringIO()
    call_command("aiperf_demo_data", results=25, stdout=out)
    assert "27 results (2 of them AIPerf-LLM)" in out.getvalue()  # a tenth as many again
    assert Result.objects.count() == 27 == ResultSeries.objects.count() == Submission.objects.count()
    assert Result.objects.filter(workload="llm").count() == 2
    assert Trial.objects.count() > 25
    assert all(s.url.startswith(demo.DEMO_URL) for s in Site.objects.all())
    assert all(r.report["demo"] is True for r in Result.objects.all())
    assert all(e.notes.startswith(demo.DEMO_NOTE) for e in Edition.objects.all())
    assert Site.objects.filter(keys__isnull=False).distinct().count() == Site.objects.count()


def test_figures_hang_together_as_verified_ones_do():
    demo.generate(30)
    th = thresholds()
    for r in Result.objects.filter(workload="image").select_related("series"):
        points = r.series.points
        assert points[-1]["score"] == r.score_ops and points[-1]["max_accuracy"] == r.max_accuracy
        assert r.regulated_score_ops == pytest.approx(scoring.regulated_score(r.score_ops, r.max_accuracy))
        assert [p["t"] for p in points] == pytest.approx(scoring.grid(r.duration_s))
        assert r.score_ops <= r.peak_flops and r.efficiency == pytest.approx(r.score_ops / r.peak_flops)
        cv = scoring.coefficient_of_variation(p["score"] for p in scoring.series_window(points, th["stability_window"]))
        check = next(c for c in r.report["checks"] if c["name"] == "stability.score_cv")
        assert check["measured"] == cv and check["passed"] == (cv <= th["max_score_cv"])
        valid = all(c["passed"] for c in r.report["checks"] if c["name"].startswith("validity."))
        assert r.division == ("official" if official(r.report["checks"]) else "open")
        assert r.verification_level == ("full" if valid and check["passed"] else "partial")
        trials = list(r.trials.all())
        assert max(t.ended_s for t in trials) <= r.duration_s
        assert max(t.best_accuracy for t in trials) == pytest.approx(r.max_accuracy)
    for entry in EditionEntry.objects.select_related("edition", "result"):
        assert entry.result.published_at <= entry.edition.frozen_at


def test_the_llm_results_are_verifications_of_runs_of_their_own_figures():
    """Each AIPerf-LLM demo result is what spec.verify reported of a generated run: every check passed, its
    score the rules' FLOPs over its time, its series and trials the report's; llm-kjv official, llm open."""
    from aiperf_runner.spec import llmrules

    demo.generate(40, llm_results=8)
    llm = list(Result.objects.filter(workload="llm").select_related("series", "system"))
    assert len(llm) == 8 and {r.rules for r in llm} == {"llm-v1"}
    for r in llm:
        checks = r.report["checks"]
        assert all(c["passed"] for c in checks), [c for c in checks if not c["passed"]]
        assert r.report["flops"] / r.duration_s == pytest.approx(r.score_ops)
        assert r.regulated_score_ops == pytest.approx(llmrules.regulated_score_ops(r.score_ops, r.best_loss))
        assert r.best_loss <= llmrules.llm_preset(r.preset).loss_gate
        assert r.series.points[-1]["best_loss"] == r.best_loss and r.series.points[-1]["t"] == r.duration_s
        assert r.division == ("official" if r.preset == "llm-kjv" else "open")
        assert r.witnessed and r.report["system"]["registered"] and r.report["fingerprint"] == r.submission.key.fingerprint
        assert set(r.report["morphisms_used"]) == {"insert_block", "widen_mlp", "add_heads"}
        trials = list(r.trials.all())
        assert len(trials) > 10 and min(t.best_loss for t in trials if t.best_loss is not None) == r.best_loss
        assert all(t.train_flops_per_image for t in trials)
    assert {r.preset for r in llm} == {"llm", "llm-kjv"}
    official = [r for r in llm if r.division == "official"]
    assert official and all(r.audit == Result.Audit.DEMO for r in official)


def test_running_again_replaces_demo_data_and_keeps_real_data():
    real = Site(name="Real Lab", country="FR")
    real.save()
    demo.generate(10)
    demo.generate(7, seed=3)
    assert Result.objects.count() == 7
    assert Site.objects.filter(pk=real.pk).exists()
    out = io.StringIO()
    call_command("aiperf_demo_data", clear=True, force=True, stdout=out)
    assert "removed 7" in out.getvalue()
    assert not Result.objects.exists() and not System.objects.exists() and not Edition.objects.exists()
    assert list(Site.objects.values_list("name", flat=True)) == ["Real Lab"]


def test_same_seed_same_data():
    demo.generate(5, seed=11)
    first = sorted(Result.objects.values_list("score_ops", flat=True))
    demo.generate(5, seed=11)
    assert sorted(Result.objects.values_list("score_ops", flat=True)) == first


def test_the_demo_official_results_are_what_their_reports_say(demo_data):
    """Registered and witnessed, as their reports (a registered, witnessed template run) claim; never audited:
    generated figures have no weights or committed states, so their audit says `demo`, not `passed`."""
    from leaderboard.models import Result

    demo_data(30)
    official = Result.objects.filter(division="official").select_related("system")
    assert official.exists()
    for r in official:
        assert r.trust() == {"registered": True, "witnessed": True, "audit": "demo", "review": "not needed"}, r.pk
        assert r.audited_at is None and r.audit_report["demo"] is True, r.pk
        assert not r.report["system"]["describe"].startswith("unregistered"), r.report["system"]["describe"]
    assert not Result.objects.filter(audit=Result.Audit.PASSED).exists()


def test_the_demo_editions_rank_each_system_once(demo_data):
    demo_data(120)
    for edition in Edition.objects.exclude(frozen_at=None):
        ranked = list(edition.entries.exclude(rank=None).values_list("result__system_id", "division", "result__rules"))
        assert len(ranked) == len(set(ranked)), edition.name  # one rank per system, division and list
        assert edition.entries.filter(rank=None).exclude(rank_all=None).count() == \
            edition.entries.count() - len(ranked)


def test_the_demo_systems_count_the_runs_behind_their_results(demo_data):
    """A witnessed result had a run token: a demo system's page counts attempted >= submitted >= verified, and
    verified is its witnessed results; the tokens say `demo` and carry no signature of the service's key."""
    from leaderboard.attempts import counts_of
    from leaderboard.models import RunAttempt

    demo_data(60)
    systems = list(System.objects.values_list("pk", flat=True))
    counts = counts_of(systems)
    abandoned = 0
    for pk in systems:
        c = counts[pk]
        witnessed = Result.objects.filter(system_id=pk, witnessed=True).count()
        assert c["attempted"] >= c["submitted"] == c["verified"] == witnessed > 0, (pk, c)
        abandoned += c["abandoned"]
    assert abandoned > 0  # some runs were started and never submitted
    assert all(a.statement["demo"] is True and a.signature == "" for a in RunAttempt.objects.all())
    for s in System.objects.all():  # the facts a registration gives
        assert s.memory_per_node > 0 and s.accelerators_per_node * s.nodes == s.accelerator_count, s.pk
    demo.clear()
    assert not RunAttempt.objects.exists()
