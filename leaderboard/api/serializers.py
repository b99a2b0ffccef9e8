"""Serializers of the public API. Ranks are the stored ones (leaderboard/ranking.py), or an edition's."""

from __future__ import annotations

from typing import Any

from aiperf_runner.spec import keys as spec_keys
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from leaderboard.models import Edition, Result, Site, SiteKey, Submission, System, Trial


def result_page_url(request, result_id: int) -> str:
    path = f"/results/{result_id}"
    return request.build_absolute_uri(path) if request is not None else path


class SiteBriefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Site
        fields = ["id", "name", "country"]


class SystemBriefSerializer(serializers.ModelSerializer):
    class Meta:
        model = System
        fields = ["id", "name", "vendor", "accelerator_model", "accelerator_count", "nodes", "interconnect"]


class SiteSerializer(serializers.ModelSerializer):
    keys = serializers.SerializerMethodField()
    systems = serializers.IntegerField(source="systems.count", read_only=True)
    results = serializers.SerializerMethodField()

    class Meta:
        model = Site
        fields = ["id", "name", "country", "url", "created_at", "systems", "results", "keys"]

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_keys(self, site):
        return [{"fingerprint": k.fingerprint, "revoked": k.revoked} for k in site.keys.all()]

    def get_results(self, site) -> int:
        return Result.objects.live().filter(site=site).count()


class SystemSerializer(serializers.ModelSerializer):
    site = SiteBriefSerializer(read_only=True)
    results = serializers.SerializerMethodField()

    class Meta:
        model = System
        fields = ["id", "name", "site", "vendor", "accelerator_model", "accelerator_count", "nodes",
                  "interconnect", "cpu_model", "cpu_cores", "peak_flops", "created_at", "results"]

    def get_results(self, system) -> list[int]:
        return list(Result.objects.live().filter(system=system).order_by("-score_ops").values_list("pk", flat=True))


class LeaderboardEntrySerializer(serializers.ModelSerializer):
    """One line of the ranked list."""

    rank = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField(help_text="the result's web page")
    site = SiteBriefSerializer(read_only=True)
    system = SystemBriefSerializer(read_only=True)

    class Meta:
        model = Result
        fields = ["rank", "id", "url", "division", "site", "system", "score_ops", "regulated_score_ops",
                  "max_accuracy", "efficiency", "peak_flops", "duration_s", "precision", "preset",
                  "verification_level", "rules_version", "verifier_version", "verified_at"]

    def get_rank(self, result: Result) -> int | None:
        # `list_rank` when the view says which list (an edition's rank in an edition), else the live rank.
        return getattr(result, "list_rank", result.rank)

    def get_url(self, result) -> str:
        return result_page_url(self.context.get("request"), result.pk)


class ResultDetailSerializer(LeaderboardEntrySerializer):
    series = serializers.JSONField(source="series.points", read_only=True,
                                   help_text="[{t, work, score, regulated, max_accuracy}], t in seconds from run start")
    submission = serializers.IntegerField(source="submission_id", read_only=True)
    status = serializers.CharField(source="submission.status", read_only=True)

    class Meta(LeaderboardEntrySerializer.Meta):
        fields = LeaderboardEntrySerializer.Meta.fields + [
            "submission", "status", "run_id", "published", "trials_finished", "epochs", "spec_version",
            "runner_version", "started_at", "report", "series"]


class TrialSerializer(serializers.ModelSerializer):
    class Meta:
        model = Trial
        fields = ["trial", "arch_hash", "parent", "morphisms", "slot", "round", "started_s", "ended_s", "epochs",
                  "best_accuracy", "status", "train_flops_per_image", "eval_flops_per_image"]


class EditionSerializer(serializers.ModelSerializer):
    entries = serializers.IntegerField(source="entries.count", read_only=True)

    class Meta:
        model = Edition
        fields = ["id", "name", "title", "notes", "created_at", "frozen_at", "entries"]


class SubmissionSerializer(serializers.ModelSerializer):
    """A submission's place in the pipeline, and its result once verified."""

    site = SiteBriefSerializer(read_only=True)
    result = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField(help_text="the result's web page, once verified")
    score_ops = serializers.SerializerMethodField()
    regulated_score_ops = serializers.SerializerMethodField()
    division = serializers.SerializerMethodField()
    rank = serializers.SerializerMethodField()
    verification_level = serializers.SerializerMethodField()

    class Meta:
        model = Submission
        fields = ["id", "status", "site", "run_id", "sha256", "size", "created_at", "verified_at", "reasons",
                  "result", "url", "score_ops", "regulated_score_ops", "division", "rank", "verification_level"]

    @staticmethod
    def _result(sub) -> Result | None:
        try:
            return sub.result
        except Result.DoesNotExist:
            return None

    def get_result(self, sub) -> int | None:
        r = self._result(sub)
        return r.pk if r else None

    def get_url(self, sub) -> str | None:
        r = self._result(sub)
        return result_page_url(self.context.get("request"), r.pk) if r else None

    def get_score_ops(self, sub) -> float | None:
        r = self._result(sub)
        return r.score_ops if r else None

    def get_regulated_score_ops(self, sub) -> float | None:
        r = self._result(sub)
        return r.regulated_score_ops if r else None

    def get_division(self, sub) -> str | None:
        r = self._result(sub)
        return r.division if r else None

    def get_verification_level(self, sub) -> str | None:
        r = self._result(sub)
        return r.verification_level if r else None

    def get_rank(self, sub) -> int | None:
        r = self._result(sub)
        return r.rank if r else None


class SubmissionUploadSerializer(serializers.Serializer):
    bundle = serializers.FileField(help_text="the signed bundle (`aiperf-runner pack`), a tar.gz")


class SiteKeySerializer(serializers.ModelSerializer):
    public_key = serializers.CharField(help_text="`aiperf-ed25519 <base64>` (site_key.pub) or the bare base64 key")
    site = SiteBriefSerializer(read_only=True)
    revoked = serializers.BooleanField(read_only=True)

    class Meta:
        model = SiteKey
        fields = ["id", "fingerprint", "public_key", "label", "site", "created_at", "revoked", "revoked_at"]
        read_only_fields = ["fingerprint", "created_at", "revoked_at"]
        extra_kwargs: dict[str, dict[str, Any]] = {"public_key": {"validators": []}}

    def validate_public_key(self, value: str) -> str:
        try:
            key = spec_keys.parse_public_key(value)
        except (spec_keys.KeyFileError, ValueError) as exc:
            raise serializers.ValidationError(str(exc)) from None
        return spec_keys.public_b64(key)
