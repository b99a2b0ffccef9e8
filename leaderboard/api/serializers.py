"""Serializers of the public API. Ranks are the stored ones (leaderboard/ranking.py), or an edition's."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from aiperf_runner.spec import keys as spec_keys
from aiperf_runner.spec import spread as spec_spread
from aiperf_runner.spec.flops import RULES as FLOP_RULES
from aiperf_runner.spec.llmflops import DEFAULT_LLM_RULES
from aiperf_runner.spec.peaks import PRECISIONS
from django.utils import timezone as dj_timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from leaderboard import standing
from leaderboard.attempts import counts_of
from leaderboard.models import Edition, Result, Site, SiteKey, Submission, System, Trial, wanted_state_list
from leaderboard.standing import Standing
from leaderboard.systems import added_peaks, is_cpu, known_peak

UNKNOWN_FIELD = "unknown field: this endpoint does not take it"


def unknown_fields(data: Any, known: Any) -> dict[str, str]:
    """{name: why} of each field a request sent that the endpoint does not take."""
    if not isinstance(data, Mapping):
        return {}
    return {name: UNKNOWN_FIELD for name in sorted(set(data) - set(known))}


class RefusesUnknownFields:
    """A write serializer that refuses the fields it does not take, each named: a misspelt optional
    field would otherwise be dropped and its default used without a word."""

    fields: Any

    def to_internal_value(self, data: Any) -> Any:
        unknown = unknown_fields(data, self.fields)
        if unknown:
            raise serializers.ValidationError(unknown)
        return super().to_internal_value(data)  # type: ignore[misc]


def closed_request_bodies(result: dict[str, Any], generator: Any, request: Any, public: Any) -> dict[str, Any]:
    """Schema hook: the request bodies of RefusesUnknownFields serializers say `additionalProperties: false`
    (clients and schemathesis then send no field the endpoint refuses)."""
    schemas = result.get("components", {}).get("schemas", {})
    for cls in RefusesUnknownFields.__subclasses__():
        name = cls.__name__.removesuffix("Serializer") + "Request"
        if name in schemas:
            schemas[name]["additionalProperties"] = False
    return result


def result_page_url(request, result_id: int) -> str:
    if request is None:
        return f"/results/{result_id}"
    # The site's root made once per request: an export of 10,000 rows built it 10,000 times.
    root = getattr(request, "_aiperf_root", None)
    if root is None:
        root = request._aiperf_root = request.build_absolute_uri("/")
    return f"{root}results/{result_id}"


class SiteBriefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Site
        fields = ["id", "name", "country"]


class SystemBriefSerializer(serializers.ModelSerializer):
    class Meta:
        model = System
        fields = ["id", "name", "vendor", "accelerator_model", "accelerator_count", "nodes", "interconnect"]


def page_of(serializer: serializers.Serializer) -> list[Any]:
    """The objects serialized with `serializer`'s: the page (or the export) of a list, else its one object."""
    parent = serializer.parent
    if isinstance(parent, serializers.ListSerializer) and parent.instance is not None:
        return list(parent.instance)
    return [serializer.instance] if serializer.instance is not None else []


class SiteSerializer(serializers.ModelSerializer):
    # A plain string: the model's blank URLField became `oneOf: [uri, maxLength 0]` in the schema, which
    # "" matches twice (found by schemathesis). Sites are read-only in the API; manage.py checks the URL.
    url = serializers.CharField(read_only=True, help_text="the site's web page, or empty")
    keys = serializers.SerializerMethodField()
    systems = serializers.SerializerMethodField()
    results = serializers.SerializerMethodField()

    class Meta:
        model = Site
        fields = ["id", "name", "country", "url", "created_at", "systems", "results", "keys"]

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_keys(self, site):
        return [{"fingerprint": k.fingerprint, "revoked": k.revoked} for k in site.keys.all()]

    # Counted by the view's query (api/views.py SiteViewSet) for a whole page at once; else here.
    def get_systems(self, site) -> int:
        counted = getattr(site, "n_systems", None)
        return int(counted) if counted is not None else site.systems.count()

    def get_results(self, site) -> int:
        if hasattr(site, "n_live_results"):
            return int(site.n_live_results or 0)  # a site without any: the subquery's NULL
        return Result.objects.live().filter(site=site).count()


class SystemSerializer(serializers.ModelSerializer):
    site = SiteBriefSerializer(read_only=True)
    results = serializers.SerializerMethodField()
    peak_flops = serializers.SerializerMethodField(
        help_text="registered: peak FLOP/s per accelerator and precision the results are judged by "
                  "(null while pending); unregistered: what its run.json declared for the whole system")
    runs_attempted = serializers.SerializerMethodField(help_text="run tokens the service issued for it")
    runs_submitted = serializers.SerializerMethodField(help_text="of those, runs submitted")
    runs_verified = serializers.SerializerMethodField(help_text="of those, runs verified (not rejected)")
    runs_abandoned = serializers.SerializerMethodField(help_text="tokens older than a week without a submission")
    rehearsals = serializers.SerializerMethodField(help_text="rehearsal tokens the service issued for it (counted "
                                                             "apart from the runs above)")
    rehearsals_verified = serializers.SerializerMethodField(help_text="of those, rehearsals verified")

    class Meta:
        model = System
        fields = ["id", "name", "site", "registered", "status", "status_reason", "vendor", "accelerator_model",
                  "accelerators_per_node", "accelerator_count", "nodes", "interconnect", "cpu_model", "cpu_cores",
                  "memory_per_node", "peak_flops", "created_at", "results", "runs_attempted", "runs_submitted",
                  "runs_verified", "runs_abandoned", "rehearsals", "rehearsals_verified"]

    def get_results(self, system) -> list[int]:
        live = getattr(system, "live_results", None)  # prefetched for a page by the view (SystemViewSet)
        if live is not None:
            return [r.pk for r in live]
        return list(Result.objects.live().filter(system=system).order_by("-score_ops").values_list("pk", flat=True))

    @extend_schema_field(serializers.DictField(child=serializers.FloatField(), allow_null=True))
    def get_peak_flops(self, system):
        if not system.registered:
            return system.peak_flops
        if is_cpu(system.accelerator_model):
            return None
        if "_peaks" not in self.context:
            self.context["_peaks"] = added_peaks()  # type: ignore[index]
        return known_peak(system.accelerator_model, self.context["_peaks"])

    def _attempts(self, system) -> dict[str, int]:
        cache: dict[int, dict[str, int]] = self.context.setdefault("_attempts", {})  # type: ignore[attr-defined]
        if system.pk not in cache:  # the whole page's counts in one query
            cache.update(counts_of([s.pk for s in page_of(self) if s.pk not in cache] or [system.pk]))
        return cache[system.pk]

    def get_runs_attempted(self, system) -> int:
        return self._attempts(system)["attempted"]

    def get_runs_submitted(self, system) -> int:
        return self._attempts(system)["submitted"]

    def get_runs_verified(self, system) -> int:
        return self._attempts(system)["verified"]

    def get_runs_abandoned(self, system) -> int:
        return self._attempts(system)["abandoned"]

    def get_rehearsals(self, system) -> int:
        return self._attempts(system)["rehearsals"]

    def get_rehearsals_verified(self, system) -> int:
        return self._attempts(system)["rehearsals_verified"]


class SystemRegistrationSerializer(RefusesUnknownFields, serializers.Serializer):
    """What a site registers (`aiperf-runner system add`)."""

    name = serializers.CharField(max_length=200)
    accelerator_model = serializers.CharField(max_length=200, help_text="as the runner records it; 'cpu' for none")
    accelerators_per_node = serializers.IntegerField(min_value=0, max_value=1024)
    nodes = serializers.IntegerField(min_value=1, max_value=1_000_000)
    interconnect = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    cpu_model = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    cpu_cores = serializers.IntegerField(min_value=0, max_value=100_000, required=False, default=0,
                                         help_text="per node")
    # A bound the database column holds (a 64-bit integer; the fuzzer's 9.6e19 was a 500): 1 PiB a node.
    memory_per_node = serializers.IntegerField(min_value=0, max_value=1 << 50, required=False, default=0,
                                               help_text="bytes (at most 1 PiB)")

    def validate(self, data):
        if data["accelerator_model"].strip().lower() != "cpu" and data["accelerators_per_node"] < 1:
            raise serializers.ValidationError({"accelerators_per_node": "at least 1 (or accelerator_model 'cpu')"})
        return data


class RunRequestSerializer(RefusesUnknownFields, serializers.Serializer):
    """A run a site is about to start (the fields its token binds)."""

    system = serializers.IntegerField(help_text="a registered system of the site")
    preset = serializers.CharField(max_length=32)
    rules = serializers.ChoiceField(choices=[*FLOP_RULES, DEFAULT_LLM_RULES],
                                    help_text="the run's FLOP rules: v2 or v1-compat; llm-v1 for an AIPerf-LLM run")
    precision = serializers.ChoiceField(choices=list(PRECISIONS))
    slots = serializers.IntegerField(min_value=1)
    devices_per_slot = serializers.IntegerField(min_value=1)
    duration_s = serializers.FloatField(min_value=1)
    runner_version = serializers.CharField(max_length=32)
    rehearsal = serializers.BooleanField(default=False, help_text="a rehearsal token (`run --rehearsal`): the run is "
                                         "witnessed and verified like an official one, shown to this site only, "
                                         "never ranked, and counted apart on the system's record")


class RunTokenSerializer(serializers.Serializer):
    run_id = serializers.CharField()
    token = serializers.DictField(help_text="{statement, signature}: run_started carries it")
    heartbeat_interval_s = serializers.FloatField()
    witness = serializers.DictField(help_text="{fingerprint, public_key} of the witness key that signed it")


class HeartbeatSerializer(serializers.Serializer):
    statement = serializers.DictField(help_text="run_id, heartbeat_seq, head, log_id, work, epochs, best_accuracy, "
                                                "sent_at, previous_receipt (SHA-256 of the last receipt issued for "
                                                "this run, null before the first), kind aiperf-heartbeat/1")
    signature = serializers.CharField(help_text="base64 Ed25519 signature of the statement by the site key")


class ReceiptSerializer(serializers.Serializer):
    run_id = serializers.CharField()
    heartbeat_seq = serializers.IntegerField()
    head = serializers.CharField()
    received_at = serializers.FloatField()
    beacon = serializers.CharField()
    key = serializers.CharField()
    signature = serializers.CharField()
    previous_receipt = serializers.CharField(
        allow_null=True, required=False, help_text="SHA-256 of the receipt issued before this one for the run (null "
                                                   "for the first; absent from receipts issued before they were chained)")


class WitnessKeySerializer(serializers.Serializer):
    fingerprint = serializers.CharField()
    public_key = serializers.CharField(help_text="base64 of the 32 raw Ed25519 public-key bytes")
    created_at = serializers.DateTimeField()
    retired_at = serializers.DateTimeField(allow_null=True)


class TrustSerializer(serializers.Serializer):
    """The trust line of a result (docs/site.md)."""

    registered = serializers.BooleanField(help_text="its system is registered and approved by a list maintainer")
    witnessed = serializers.BooleanField(help_text="the service witnessed the run (run token and receipts)")
    audit = serializers.CharField(help_text="the audit of its work: none, pending, passed, failed")
    review = serializers.CharField(help_text="a list maintainer's review: not needed, pending, approved, rejected")


class ReasonSerializer(serializers.Serializer):
    check = serializers.CharField()
    message = serializers.CharField()


_DATETIME = serializers.DateTimeField()  # DRF's ISO 8601 in the current time zone, for the rows written directly
_ZERO = timedelta(0)


def _iso(value: datetime | None) -> str | None:
    """`_DATETIME.to_representation(value)` (None for None), without its time-zone work where the time is UTC and
    so is the service's zone: it took a fifth of a 10,000-row export's serialization."""
    if value is None:
        return None
    if value.utcoffset() == _ZERO and dj_timezone.get_current_timezone_name() == "UTC":
        return value.replace(tzinfo=None).isoformat() + "Z"
    return _DATETIME.to_representation(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


class LeaderboardEntrySerializer(serializers.ModelSerializer):
    """One line of the ranked list."""

    rank = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField(help_text="the result's web page")
    site = SiteBriefSerializer(read_only=True)
    system = SystemBriefSerializer(read_only=True)
    trust = serializers.SerializerMethodField()

    class Meta:
        model = Result
        # workload and best_loss last: the CSV's earlier columns keep their places for existing readers
        fields = ["rank", "rank_all", "id", "url", "division", "rules", "review", "site", "system", "score_ops",
                  "regulated_score_ops", "max_accuracy", "efficiency", "peak_flops", "duration_s", "precision",
                  "preset", "verification_level", "rules_version", "verifier_version", "verified_at", "trust",
                  "workload", "best_loss"]

    @extend_schema_field(TrustSerializer)
    def get_trust(self, result: Result) -> dict[str, Any]:
        return result.trust()

    # The columns a row reads (the leaderboard's `only()`), its trust line's included.
    COLUMNS = ("rank", "rank_all", "workload", "division", "rules", "review", "score_ops", "regulated_score_ops",
               "max_accuracy", "best_loss", "efficiency", "peak_flops", "duration_s", "precision", "preset", "verification_level", "rules_version",
               "verifier_version", "verified_at", "witnessed", "audit", "site__name", "site__country",
               *(f"system__{c}" for c in ("name", "vendor", "accelerator_model", "accelerator_count", "nodes",
                                           "interconnect", "registered", "status")))

    def to_representation(self, result: Result) -> dict[str, Any]:
        # A list row written out directly: DRF's field-by-field way took most of an export's time (10,000 rows:
        # 1.7 of 2.9 s). The same dict, field for field (tests/web/test_api_export_rows.py); a subclass that adds
        # fields of its own (the result detail) goes DRF's way.
        if type(self) is not LeaderboardEntrySerializer:
            return super().to_representation(result)
        site, system = result.site, result.system
        return {
            "rank": self.get_rank(result), "rank_all": _int(result.rank_all), "id": result.pk,
            "url": self.get_url(result), "division": result.division, "rules": result.rules, "review": result.review,
            "site": {"id": site.pk, "name": site.name, "country": site.country},
            "system": {"id": system.pk, "name": system.name, "vendor": system.vendor,
                       "accelerator_model": system.accelerator_model, "accelerator_count": system.accelerator_count,
                       "nodes": system.nodes, "interconnect": system.interconnect},
            "score_ops": _float(result.score_ops), "regulated_score_ops": _float(result.regulated_score_ops),
            "max_accuracy": _float(result.max_accuracy), "efficiency": _float(result.efficiency),
            "peak_flops": _float(result.peak_flops), "duration_s": _float(result.duration_s),
            "precision": result.precision, "preset": result.preset, "verification_level": result.verification_level,
            "rules_version": result.rules_version, "verifier_version": result.verifier_version,
            "verified_at": _iso(result.verified_at),
            "trust": result.trust(), "workload": result.workload, "best_loss": _float(result.best_loss),
        }

    def get_rank(self, result: Result) -> int | None:
        # `list_rank` when the view says which list (an edition's rank in an edition), else the live rank.
        return getattr(result, "list_rank", result.rank)

    def get_url(self, result) -> str:
        return result_page_url(self.context.get("request"), result.pk)


class KnownSpreadSerializer(serializers.Serializer):
    """One measurement of bench/reproducibility.py (spec/spread.py)."""

    preset = serializers.CharField()
    duration_s = serializers.FloatField()
    slots = serializers.IntegerField()
    runs = serializers.IntegerField()
    score_cv = serializers.FloatField()
    regulated_cv = serializers.FloatField()
    machine = serializers.CharField()
    measured = serializers.CharField()


class ResultDetailSerializer(LeaderboardEntrySerializer):
    series = serializers.JSONField(source="series.points", read_only=True,
                                   help_text="[{t, work, score, regulated, max_accuracy}], t in seconds from run start")
    submission = serializers.IntegerField(source="submission_id", read_only=True)
    status = serializers.CharField(source="submission.status", read_only=True)
    known_spread = serializers.SerializerMethodField(
        help_text="how much identical runs of this preset move, as measured (spec/spread.py): {preset, duration_s, "
                  "slots, runs, score_cv, regulated_cv, machine, measured}; null when not measured for the preset")
    standing = serializers.SerializerMethodField(
        help_text="where the result stands: {state (live, live_not_best, review_pending, review_rejected, "
                  "audit_pending, audit_failed, withdrawn, unpublished, rehearsal), text}")
    not_official_because = serializers.SerializerMethodField(
        help_text="why it is not (yet) in the official ranking: the checks it failed and what the list waits for")

    class Meta(LeaderboardEntrySerializer.Meta):
        fields = LeaderboardEntrySerializer.Meta.fields + [
            "submission", "status", "run_id", "published", "trials_finished", "epochs", "spec_version",
            "runner_version", "started_at", "report", "series", "audit", "audit_report", "audited_at",
            "review_reason", "reviewed_at", "reviewed_by", "known_spread", "standing", "not_official_because"]

    @extend_schema_field(serializers.DictField())
    def get_standing(self, obj: Result) -> dict[str, str]:
        return standing.standing(obj).brief()

    @extend_schema_field(ReasonSerializer(many=True))
    def get_not_official_because(self, obj: Result) -> list[dict[str, str]]:
        return standing.not_official_because(obj)

    @extend_schema_field(KnownSpreadSerializer(allow_null=True))
    def get_known_spread(self, obj: Result) -> dict[str, Any] | None:
        known = spec_spread.known_spread(obj.preset, obj.duration_s)
        return None if known is None else dict(known.__dict__)


class TrialSerializer(serializers.ModelSerializer):
    class Meta:
        model = Trial
        fields = ["trial", "arch_hash", "parent", "morphisms", "slot", "round", "started_s", "ended_s", "epochs",
                  "best_accuracy", "best_loss", "status", "train_flops_per_image", "eval_flops_per_image"]


class EditionSerializer(serializers.ModelSerializer):
    """An edition: frozen and published (its entries readable), or on the calendar (upcoming, open for submissions,
    closed, or frozen under embargo until `publish_at`: its entries are not shown before)."""

    entries = serializers.SerializerMethodField(help_text="entries of a published edition; null before")
    state = serializers.SerializerMethodField(help_text="upcoming, open, closed, embargoed or published")

    class Meta:
        model = Edition
        fields = ["id", "name", "title", "notes", "created_at", "frozen_at", "rules_versions", "submissions_open",
                  "submissions_close", "publish_at", "state", "entries"]

    def get_entries(self, edition: Edition) -> int | None:
        if not edition.published:
            return None
        counted = getattr(edition, "n_entries", None)  # counted by the view's query for the whole page
        return int(counted) if counted is not None else edition.entries.count()

    def get_state(self, edition: Edition) -> str:
        return edition.state()


PRIVATE_MESSAGE = "shown to the submitting site only (its token, or its page /my-site/)"


class SubmissionSerializer(serializers.ModelSerializer):
    """A submission's place in the pipeline, and its result once verified. Anyone sees which checks a refused
    submission failed; only its own site sees their messages and a service fault's `error`."""

    site = SiteBriefSerializer(read_only=True)
    result = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField(help_text="the result's web page, once verified (none for a rehearsal: "
                                                      "its site reads it at /api/v1/results/<result>/ with its token)")
    score_ops = serializers.SerializerMethodField()
    regulated_score_ops = serializers.SerializerMethodField()
    division = serializers.SerializerMethodField()
    rank = serializers.SerializerMethodField()
    verification_level = serializers.SerializerMethodField()
    audit = serializers.SerializerMethodField(help_text="the audit of the challenged trials' weights: '' (none), "
                                                        "pending, passed, failed")
    evidence = serializers.SerializerMethodField(help_text="challenged trials whose weights the service holds")
    audit_note = serializers.SerializerMethodField(help_text="why a pending audit waits, when the service knows "
                                                             "(e.g. it has no validation data for the preset)")
    states = serializers.SerializerMethodField(help_text="the committed training states the audit asks for "
                                                         "(segments it re-executes, the best checkpoint; an "
                                                         "AIPerf-LLM trial's weights and its parent's weights and "
                                                         "moments): [{trial, sha256, path}], path the file in the "
                                                         "run directory")
    states_received = serializers.SerializerMethodField(help_text="digests of the asked-for states the service holds")
    rank_all = serializers.SerializerMethodField(help_text="its place among every live result of its division (a "
                                                           "system's repeat runs too); null off the live list")
    standing = serializers.SerializerMethodField(help_text="where its result stands: {state, text} (as on its page)")
    not_official_because = serializers.SerializerMethodField(
        help_text="why its verified result is not (yet) in the official ranking: [{check, message}]")

    # The columns a row reads (the list's `only()`), its result's standing and trust included.
    COLUMNS = ("status", "site__name", "site__country", "run_id", "sha256", "size", "created_at", "verified_at",
               "reasons", "error", "challenge", "challenged_at", "rehearsal", "proof",
               *(f"result__{c}" for c in ("submission_id", "system_id", "division", "rules", "rank", "rank_all",
                                           "review", "review_reason", "reviewed_at", "reviewed_by", "audit",
                                           "audited_at", "audit_report", "verified_at", "score_ops", "failed_checks",
                                           "regulated_score_ops", "verification_level", "workload", "preset")))

    class Meta:
        model = Submission
        fields = ["id", "status", "site", "run_id", "sha256", "size", "created_at", "verified_at", "reasons",
                  "error", "result", "url", "score_ops", "regulated_score_ops", "division", "rank", "rank_all",
                  "verification_level", "challenge", "challenged_at", "evidence", "states", "states_received", "audit",
                  "audit_note", "rehearsal", "standing", "not_official_because"]
        read_only_fields = ["challenge", "challenged_at", "rehearsal"]

    def to_representation(self, sub: Submission) -> dict[str, Any]:
        # Written out directly, as a list row is (LeaderboardEntrySerializer): DRF's field-by-field way took most
        # of the 10,000-row export's time. The same dict (tests/web/test_api_export_rows.py).
        data = self._row(sub) if type(self) is SubmissionSerializer else super().to_representation(sub)
        if not self._viewed_by_its_site(sub):
            # A refusal is public as a fact (which checks failed), its words are its site's: they quote the
            # site's run, hardware and figures. A service fault (`error`) is the service's own business.
            data["reasons"] = [{"check": r.get("check", ""), "message": PRIVATE_MESSAGE} for r in data["reasons"]]
            data["error"] = ""
        return data

    def _row(self, sub: Submission) -> dict[str, Any]:
        r, site = self._result(sub), sub.site
        return {
            "id": sub.pk, "status": sub.status, "site": {"id": site.pk, "name": site.name, "country": site.country},
            "run_id": sub.run_id, "sha256": sub.sha256, "size": sub.size,
            "created_at": _iso(sub.created_at), "verified_at": _iso(sub.verified_at),
            "reasons": sub.reasons, "error": sub.error, "result": r.pk if r else None, "url": self.get_url(sub),
            "score_ops": _float(r.score_ops) if r else None,
            "regulated_score_ops": _float(r.regulated_score_ops) if r else None,
            "division": r.division if r else None, "rank": _int(r.rank) if r else None,
            "rank_all": _int(r.rank_all) if r else None,
            "verification_level": r.verification_level if r else None, "challenge": sub.challenge,
            "challenged_at": _iso(sub.challenged_at),
            "evidence": self.get_evidence(sub), "states": self.get_states(sub),
            "states_received": self.get_states_received(sub), "audit": r.audit if r else None,
            "audit_note": self.get_audit_note(sub), "rehearsal": sub.rehearsal, "standing": self.get_standing(sub),
            "not_official_because": self.get_not_official_because(sub),
        }

    def _viewed_by_its_site(self, sub: Submission) -> bool:
        request = self.context.get("request")
        auth = getattr(request, "auth", None)
        return request is None or (isinstance(auth, Site) and auth.pk == sub.site_id)

    def get_audit(self, sub) -> str | None:
        r = self._result(sub)
        return r.audit if r else None

    def get_audit_note(self, sub) -> str:
        r = self._result(sub)
        return str((r.audit_report or {}).get("message") or "") if r else ""

    def get_evidence(self, sub) -> list[str]:
        held = getattr(sub, "evidence_list", None)  # prefetched for a page by the view
        return sorted(e.trial for e in (held if held is not None else sub.evidence.all()))

    def get_states(self, sub) -> list[dict[str, str]]:
        return wanted_state_list(sub.proof)

    def get_states_received(self, sub) -> list[str]:
        held = getattr(sub, "states_list", None)
        return sorted(st.sha256 for st in (held if held is not None else sub.states.all()))

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
        return result_page_url(self.context.get("request"), r.pk) if r and not sub.rehearsal else None

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

    def get_rank_all(self, sub) -> int | None:
        r = self._result(sub)
        return r.rank_all if r else None

    def _standing(self, sub) -> Standing | None:
        """Its result's standing, worked out once per row (two fields read it) from facts read once per page."""
        r = self._result(sub)
        if r is None:
            return None
        known: dict[int, Standing] = self.context.setdefault("_standing", {})  # type: ignore[attr-defined]
        if r.pk not in known:
            if "_page" not in self.context:
                self.context["_page"] = standing.page_facts(  # type: ignore[index]
                    res for res in map(self._result, page_of(self)) if res is not None)
            known[r.pk] = standing.standing(r, self.context["_page"])
        return known[r.pk]

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_standing(self, sub) -> dict[str, str] | None:
        state = self._standing(sub)
        return state.brief() if state else None

    @extend_schema_field(ReasonSerializer(many=True))
    def get_not_official_because(self, sub) -> list[dict[str, str]]:
        r = self._result(sub)
        if r is None:
            return []
        return standing.not_official_because(r, self._standing(sub))


def flag(raw: object) -> bool:
    """A yes/no field of a form or of tus Upload-Metadata, read as DRF reads a BooleanField's true values
    (`true`, `1`, `yes`, `on`, ...); anything else, or nothing, is no."""
    return str(raw or "").strip() in serializers.BooleanField.TRUE_VALUES


class SubmissionUploadSerializer(RefusesUnknownFields, serializers.Serializer):
    bundle = serializers.FileField(help_text="the signed bundle (`aiperf-runner pack`), a tar.gz")
    rehearsal = serializers.BooleanField(default=False, help_text="submitted as a rehearsal (`submit --rehearsal`): "
                                         "required for a run on a rehearsal token, refused for any other")


class SiteKeySerializer(RefusesUnknownFields, serializers.ModelSerializer):
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
