"""Admin for every model, with the maintainer's actions: re-verify, publish, withdraw, revoke key, freeze.

A change made here to what is on the live list (a submission's status, a result's `published`, a
deletion) re-ranks the list (leaderboard/ranking.py), as the pipeline's own changes do.
"""

from __future__ import annotations

from typing import Any

from aiperf_runner.spec import keys as spec_keys
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone

from leaderboard import pipeline, ranking, systems, tasks, translog
from leaderboard.models import (
    AcceleratorPeak,
    Application,
    Edition,
    EditionEntry,
    Heartbeat,
    Result,
    ResultSeries,
    RunAttempt,
    Site,
    SiteKey,
    Submission,
    System,
    Trial,
    WitnessKey,
)


class SiteKeyInline(admin.TabularInline):
    model = SiteKey
    extra = 0
    fields = ["fingerprint", "label", "created_at", "revoked_at"]
    readonly_fields = ["fingerprint", "created_at"]


@admin.register(Site)
class SiteAdmin(admin.ModelAdmin):
    list_display = ["name", "country", "token_prefix", "created_at"]
    list_filter = ["country"]
    search_fields = ["name"]
    readonly_fields = ["token_prefix"]
    inlines = [SiteKeyInline]
    actions = ["rotate_token"]

    @admin.action(description="Make a new API token (shown once)")
    def rotate_token(self, request, queryset):
        for site in queryset:
            token = site.new_token()
            site.save(update_fields=["token_hash", "token_prefix"])
            self.message_user(request, f"{site.name}: new API token {token}", messages.WARNING)


@admin.register(Application)
class ApplicationAdmin(admin.ModelAdmin):
    list_display = ["centre", "country", "contact_email", "status", "created_at", "site"]
    list_filter = ["status", "country"]
    search_fields = ["centre", "contact_name", "contact_email"]
    readonly_fields = ["status", "decided_at", "decided_by", "site"]
    actions = ["approve", "decline"]

    @admin.action(description="Approve: make the site and show its API token (once)")
    def approve(self, request, queryset):
        for application in queryset.filter(status=Application.Status.PENDING):
            with transaction.atomic():
                site = Site(name=application.centre, country=application.country, url=application.url)
                token = site.new_token()
                site.save()
                application.status, application.site = Application.Status.APPROVED, site
                application.decided_at, application.decided_by = timezone.now(), str(request.user)
                application.save()
            self.message_user(request, f"{site.name}: site {site.pk} made; its API token, shown this once, for "
                                       f"{application.contact_email}: {token}", messages.WARNING)

    @admin.action(description="Decline")
    def decline(self, request, queryset):
        n = queryset.filter(status=Application.Status.PENDING).update(
            status=Application.Status.DECLINED, decided_at=timezone.now(), decided_by=str(request.user))
        self.message_user(request, f"{n} application(s) declined")


@admin.register(SiteKey)
class SiteKeyAdmin(admin.ModelAdmin):
    list_display = ["fingerprint", "site", "label", "created_at", "revoked_at"]
    list_filter = ["site", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["fingerprint", "site__name", "label"]
    readonly_fields = ["fingerprint"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset):
        n = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"{n} key(s) revoked")

    def save_model(self, request, obj, form, change):
        key = spec_keys.parse_public_key(obj.public_key)
        obj.public_key = spec_keys.public_b64(key)
        obj.fingerprint = spec_keys.fingerprint(key)
        super().save_model(request, obj, form, change)


@admin.register(System)
class SystemAdmin(admin.ModelAdmin):
    list_display = ["__str__", "site", "registered", "status", "vendor", "accelerator_model", "accelerator_count",
                    "nodes", "interconnect"]
    list_filter = ["registered", "status", "vendor", "accelerator_model", "site__country"]
    search_fields = ["name", "accelerator_model", "site__name", "cpu_model"]
    actions = ["approve", "reject"]

    @admin.action(description="Approve (the model's peak is known)")
    def approve(self, request, queryset):
        n, ids = systems.decide(queryset, True, "in the admin", str(request.user))
        for pk in ids:
            tasks.verify_submission.delay(pk, reverify=True)
        self.message_user(request, f"{n} system(s) approved; their results queued for re-verification")

    @admin.action(description="Reject")
    def reject(self, request, queryset):
        n, ids = systems.decide(queryset, False, "in the admin", str(request.user))
        for pk in ids:
            tasks.verify_submission.delay(pk, reverify=True)
        self.message_user(request, f"{n} system(s) rejected; their results queued for re-verification")


@admin.register(AcceleratorPeak)
class AcceleratorPeakAdmin(admin.ModelAdmin):
    """A maintainer adds a model's peak: its pending systems are approved and their results re-verified."""

    list_display = ["accelerator_model", "vendor", "fp32", "tf32", "bf16", "fp16", "source", "added_by", "created_at"]
    search_fields = ["accelerator_model", "vendor"]
    readonly_fields = ["added_by", "created_at"]

    def save_model(self, request, obj, form, change):
        obj.added_by = str(request.user)
        super().save_model(request, obj, form, change)
        ids = systems.peak_added(obj)
        for pk in ids:
            tasks.verify_submission.delay(pk, reverify=True)
        self.message_user(request, f"{obj.accelerator_model}: pending systems approved, {len(ids)} result(s) "
                                   "queued for re-verification")


@admin.register(WitnessKey)
class WitnessKeyAdmin(admin.ModelAdmin):
    list_display = ["fingerprint", "created_at", "retired_at"]
    readonly_fields = ["fingerprint", "public_key", "created_at"]


class HeartbeatInline(admin.TabularInline):
    model = Heartbeat
    extra = 0
    fields = ["heartbeat_seq", "head", "received_at", "epochs", "work", "best_accuracy"]
    readonly_fields = ["heartbeat_seq", "head", "received_at", "epochs", "work", "best_accuracy"]
    can_delete = False


@admin.register(RunAttempt)
class RunAttemptAdmin(admin.ModelAdmin):
    list_display = ["run_id", "site", "system", "issued_at", "heartbeats", "last_heartbeat_at", "reused", "submission"]
    list_filter = ["site", "reused"]
    search_fields = ["run_id", "site__name"]
    readonly_fields = [f.name for f in RunAttempt._meta.fields]
    inlines = [HeartbeatInline]


class RerankingAdmin(admin.ModelAdmin):
    """Saving or deleting rows of this model may change the live list: the stored ranks follow, and the
    list's log records each result changed or deleted, by whom (leaderboard/translog.py)."""

    @staticmethod
    def results_of(model: Any, pks: list[Any]) -> QuerySet[Result]:
        return Result.objects.filter(pk__in=pks) if model is Result else Result.objects.filter(submission__in=pks)

    @transaction.atomic
    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        ranking.rerank()
        translog.record_many(self.results_of(type(obj), [obj.pk]), "edited", by=str(request.user))

    @transaction.atomic
    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        gone = list(self.results_of(type(obj), [obj.pk]).values_list("pk", flat=True))
        super().delete_model(request, obj)
        ranking.rerank()
        translog.record_removed(gone, "deleted", f"deleted in the admin by {request.user}")

    @transaction.atomic
    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        gone = list(self.results_of(queryset.model, list(queryset.values_list("pk", flat=True))).values_list(
            "pk", flat=True))
        super().delete_queryset(request, queryset)
        ranking.rerank()
        translog.record_removed(gone, "deleted", f"deleted in the admin by {request.user}")


@admin.register(Submission)
class SubmissionAdmin(RerankingAdmin):
    list_display = ["id", "site", "status", "run_id", "size", "created_at", "verified_at", "attempts"]
    list_filter = ["status", "site", "created_at"]
    search_fields = ["run_id", "sha256", "site__name"]
    readonly_fields = ["sha256", "size", "run_id", "bundle", "claim_token", "claimed_at", "attempts", "reasons"]
    actions = ["reverify", "publish", "withdraw"]

    @admin.action(description="Re-verify (queue the verification task again)")
    def reverify(self, request, queryset):
        n = 0
        for sub in queryset:
            if sub.status in (Submission.Status.VERIFIED, Submission.Status.PUBLISHED):
                tasks.verify_submission.delay(sub.pk, reverify=True)
            elif sub.status in (Submission.Status.RECEIVED, Submission.Status.VERIFYING):
                tasks.verify_submission.delay(sub.pk)
            else:
                continue
            n += 1
        self.message_user(request, f"{n} submission(s) queued for verification")

    @admin.action(description="Publish (put the result on the live list)")
    def publish(self, request, queryset):
        n = sum(pipeline.publish(sub, by=str(request.user)) for sub in queryset)
        self.message_user(request, f"{n} result(s) published")

    @admin.action(description="Withdraw (take the result off the live list)")
    def withdraw(self, request, queryset):
        n = sum(pipeline.withdraw(sub, by=str(request.user)) for sub in queryset)
        self.message_user(request, f"{n} result(s) withdrawn")


class ResultSeriesInline(admin.StackedInline):
    model = ResultSeries
    extra = 0
    readonly_fields = ["points"]


@admin.register(Result)
class ResultAdmin(RerankingAdmin):
    list_display = ["id", "site", "system", "division", "score_ops", "regulated_score_ops", "max_accuracy",
                    "verification_level", "published", "verifier_version"]
    list_filter = ["review", "division", "rules", "published", "verification_level", "rules_version",
                   "verifier_version", "system__vendor", "site__country"]
    search_fields = ["run_id", "site__name", "system__accelerator_model"]
    readonly_fields = [f.name for f in Result._meta.fields if f.name not in ("published",)]
    inlines = [ResultSeriesInline]
    actions = ["reverify", "publish", "withdraw", "approve_review", "reject_review"]

    @admin.action(description="Review: approve (enters the list)")
    def approve_review(self, request, queryset):
        return self._review(request, queryset, approve=True)

    @admin.action(description="Review: reject (stays off the list)")
    def reject_review(self, request, queryset):
        return self._review(request, queryset, approve=False)

    def _review(self, request, queryset, *, approve: bool):
        """Asks for the reason first (it is recorded and shown with the result)."""
        reason = request.POST.get("reason", "").strip()
        if "apply" not in request.POST or not reason:
            return TemplateResponse(request, "admin/review_reason.html", {
                "results": queryset, "approve": approve, "action": request.POST.get("action"),
                "opts": self.model._meta, "missing": "apply" in request.POST})
        for r in queryset:
            pipeline.review(r, approve, reason, str(request.user))
        self.message_user(request, f"{queryset.count()} result(s) {'approved' if approve else 'rejected'}: {reason}")
        return None

    @admin.action(description="Re-verify")
    def reverify(self, request, queryset):
        for r in queryset:
            tasks.verify_submission.delay(r.submission_id, reverify=True)
        self.message_user(request, f"{queryset.count()} result(s) queued for re-verification")

    @admin.action(description="Publish")
    def publish(self, request, queryset):
        n = sum(pipeline.publish(r.submission, by=str(request.user)) for r in queryset.select_related("submission"))
        self.message_user(request, f"{n} result(s) published")

    @admin.action(description="Withdraw")
    def withdraw(self, request, queryset):
        n = sum(pipeline.withdraw(r.submission, by=str(request.user)) for r in queryset.select_related("submission"))
        self.message_user(request, f"{n} result(s) withdrawn")


@admin.register(Trial)
class TrialAdmin(admin.ModelAdmin):
    list_display = ["result", "trial", "slot", "epochs", "best_accuracy", "status"]
    list_filter = ["status"]
    search_fields = ["arch_hash", "trial"]


class EditionEntryInline(admin.TabularInline):
    model = EditionEntry
    extra = 0
    readonly_fields = ["result", "division", "rank", "score_ops", "regulated_score_ops"]
    can_delete = False


@admin.register(Edition)
class EditionAdmin(admin.ModelAdmin):
    list_display = ["name", "title", "submissions_open", "submissions_close", "frozen_at", "publish_at"]
    list_filter = [("frozen_at", admin.EmptyFieldListFilter)]
    readonly_fields = ["frozen_at"]
    inlines = [EditionEntryInline]
    actions = ["freeze"]

    @admin.action(description="Freeze (snapshot the live list into the edition)")
    def freeze(self, request, queryset):
        for edition in queryset:
            try:
                n = ranking.freeze_edition(edition)
            except ValueError as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.message_user(request, f"{edition.name}: {n} entries frozen")
