"""A site's own pages: its people sign in with the site's API token (kept in their session, never in a URL)
and follow every submission of the site, whatever its state (received, verifying, rejected with its reasons,
verified with where it stands and what keeps it from the official division, rehearsals), and its runs in
progress (tokens issued, no submission yet). Private: never cached, never shown to another site."""

from __future__ import annotations

from typing import Any

from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from leaderboard import limits, standing
from leaderboard.models import Result, RunAttempt, Site, Submission, hash_token
from leaderboard.site import format as fmt

SESSION_KEY = "aiperf_site"
SHOWN = 200  # the newest submissions and runs a page lists


def signed_in(request: HttpRequest) -> Site | None:
    pk = request.session.get(SESSION_KEY)
    return Site.objects.filter(pk=pk).first() if pk else None


@never_cache
@require_http_methods(["GET", "POST"])
def login(request: HttpRequest) -> HttpResponse:
    error, status = "", 200
    if request.method == "POST":
        if limits.token_guesses_exhausted(request):
            error, status = "Too many failed sign-ins from this address: try again in a few minutes.", 429
        else:
            token = str(request.POST.get("token", "")).strip()
            site = Site.objects.filter(token_hash=hash_token(token)).first() if token else None
            if site is not None:
                request.session.cycle_key()
                request.session[SESSION_KEY] = site.pk
                return HttpResponseRedirect(reverse("my-site"))
            limits.count_failed_token(request)
            error, status = "That is not a site's API token.", 403
    return render(request, "site/account_login.html", {"error": error, "nav": "my-site"}, status=status)


@require_http_methods(["POST"])
def logout(request: HttpRequest) -> HttpResponse:
    request.session.flush()
    return HttpResponseRedirect(reverse("home"))


def _submission_row(sub: Submission) -> dict[str, Any]:
    result: Result | None = getattr(sub, "result", None) if hasattr(sub, "result") else None
    row: dict[str, Any] = {"sub": sub, "received": fmt.date(sub.created_at), "verified": fmt.date(sub.verified_at),
                           "reasons": sub.reasons or [], "result": result, "standing": None, "because": []}
    if result is not None:
        row["standing"] = standing.standing(result)
        row["because"] = standing.not_official_because(result)
        row["score"] = fmt.ops(result.score_ops)
    return row


@never_cache
def home(request: HttpRequest) -> HttpResponse:
    site = signed_in(request)
    if site is None:
        return HttpResponseRedirect(reverse("my-site-login"))
    subs = list(Submission.objects.filter(site=site).select_related("result", "result__system", "result__site")
                .defer("result__report").order_by("-created_at")[:SHOWN])
    # The report is read per verified result for what keeps it from the official division.
    reports = dict(Result.objects.filter(submission__in=subs).values_list("submission_id", "report"))
    for sub in subs:
        if hasattr(sub, "result"):
            sub.result.report = reports.get(sub.pk) or {}
    running = list(RunAttempt.objects.filter(site=site, submission=None).select_related("system")
                   .order_by("-issued_at")[:SHOWN])
    by_status = dict(Submission.objects.filter(site=site).order_by().values_list("status").annotate(n=Count("pk")))
    counts = ", ".join(f"{by_status[s]} {s}" for s in Submission.Status.values if by_status.get(s))
    return render(request, "site/account.html", {
        "site": site, "rows": [_submission_row(s) for s in subs], "counts": counts, "nav": "my-site",
        "running": [{"run": r, "issued": fmt.date(r.issued_at), "last": fmt.date(r.last_heartbeat_at)}
                    for r in running]})
