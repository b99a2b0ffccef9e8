"""API views: public reads, uploads and key registration with a site token."""

from __future__ import annotations

import base64
import logging
from typing import Any

from aiperf_runner.spec import keys as spec_keys
from aiperf_runner.spec.flops import RULES as FLOP_RULES
from django.conf import settings
from django.db import IntegrityError
from django.db.models import Count, F, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.utils.decorators import method_decorator
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from leaderboard import audit, intake, limits, listcache, systems, tasks, witness
from leaderboard.api import exports, filters
from leaderboard.api import serializers as s
from leaderboard.api.pagination import is_export
from leaderboard.errors import Rejected
from leaderboard.models import (
    LLM_RULES,
    Edition,
    EditionEntry,
    Evidence,
    Result,
    RunAttempt,
    Site,
    SiteKey,
    StateEvidence,
    Submission,
    System,
    WitnessKey,
    default_rules,
)

logger = logging.getLogger(__name__)

CheckError = inline_serializer("CheckError", {"detail": serializers.CharField(),
                                              "check": serializers.CharField(help_text="the check that failed")})

EDITION = OpenApiParameter("edition", str, description='a frozen edition (e.g. "2026-11") instead of the live list')
RULES = OpenApiParameter("rules", str, enum=[*FLOP_RULES, LLM_RULES],
                         description="which list: v2 (default) or the v1-compat results, ranked apart; "
                                     "llm-v1 is AIPerf-LLM's (the default with workload=llm)")
ALL = OpenApiParameter("all", bool, description="every result, not only each system's best (ranks: rank_all)")
REVIEW = OpenApiParameter("review", str, enum=["pending", "rejected"],
                          description="results waiting for a list maintainer's review (or refused), off the list")
FORMAT = OpenApiParameter("format", str, enum=["json", "csv"],
                          description="export the whole filtered list (no pagination) as JSON or CSV")
RANKED_ORDERING = ["rank", "score_ops", "regulated_score_ops", "max_accuracy", "efficiency", "duration_s",
                   "verified_at", "system__nodes", "system__accelerator_count"]


class RankedResults(viewsets.ReadOnlyModelViewSet):
    """Shared by the leaderboard and results: the live list with its stored ranks, or an edition with its own.

    Each row carries `list_rank`, the rank the serializers show: the stored one (leaderboard/ranking.py)
    on the live list, the frozen one in an edition.
    """

    filterset_class = filters.ResultFilter
    filter_backends = [DjangoFilterBackend, filters.RankOrderingFilter]
    ordering_fields = RANKED_ORDERING
    ordering = ["rank"]

    def edition(self) -> Edition | None:
        name = self.request.query_params.get("edition")
        if not name:
            return None
        return get_object_or_404(Edition.objects.public(), name=name)

    def every_result(self) -> bool:
        return self.request.query_params.get("all", "") in ("1", "true", "yes")

    def with_ranks(self, qs: QuerySet[Result], edition: Edition | None) -> QuerySet[Result]:
        field = "rank_all" if self.every_result() else "rank"
        if edition is None:
            return qs.annotate(list_rank=F(field))
        entry = EditionEntry.objects.filter(edition=edition, result=OuterRef("pk"))
        return qs.annotate(list_rank=Subquery(entry.values(field)[:1]))

    def base_queryset(self) -> QuerySet[Result]:
        params = self.request.query_params
        # A list row never shows the verification or audit report (the bulk of a row): not read.
        qs = (Result.objects.select_related("site", "system").defer("report", "audit_report")
              .filter(rules=params.get("rules") or default_rules(params.get("workload"))))
        review = params.get("review")
        if review in (Result.Review.PENDING, Result.Review.REJECTED):
            return qs.filter(review=review).annotate(list_rank=F("rank"))
        edition = self.edition()
        field = "rank_all" if self.every_result() else "rank"  # set on live rows only: listed()'s column
        listed: QuerySet[Result] = self.with_ranks(
            qs.filter(edition_entries__edition=edition) if edition is not None
            else qs.filter(**{f"{field}__isnull": False}), edition)
        # The live list already filters on its rank column (said twice, the planner misjudges the rows).
        return listed if self.every_result() or edition is None else listed.exclude(**{"list_rank": None})

    def list(self, request, *args, **kwargs):
        if is_export(request) and self.get_serializer_class() is s.LeaderboardEntrySerializer:
            # The whole list (an export): its rows written from values(), the same rows as a page's.
            return Response(exports.leaderboard_rows(self.filter_queryset(self.get_queryset()), request))
        return super().list(request, *args, **kwargs)


@extend_schema_view(list=extend_schema(parameters=[EDITION, RULES, ALL, REVIEW, FORMAT]))
@method_decorator(listcache.cached_page("api"), name="dispatch")  # anonymous reads, dropped on every change
class LeaderboardViewSet(RankedResults):
    """The ranked list: each system's best result, by score within its division (and FLOP rules).
    Filters: division, accelerator, vendor, country, edition, rules, all, review."""

    serializer_class = s.LeaderboardEntrySerializer

    def get_queryset(self):
        # Only the columns a row shows: an export of every result (10,000 rows) spent a third of its time making
        # the rows' objects, most of it on columns no row reads.
        return self.base_queryset().only(*s.LeaderboardEntrySerializer.COLUMNS)


@extend_schema_view(list=extend_schema(parameters=[EDITION, RULES, ALL, REVIEW, FORMAT]))
class ResultViewSet(RankedResults):
    """Results on the list, each with its series and verification report."""

    def get_queryset(self):
        if self.action == "list":
            return self.base_queryset()
        # One result: on the live list, under review, or cited by a frozen edition; a rehearsal's, to its site.
        qs = Result.objects.select_related("site", "system", "series", "submission")
        return self.with_ranks(qs.filter(Q(pk__in=Result.objects.live().values("pk"))
                                         | Q(review__in=[Result.Review.PENDING, Result.Review.REJECTED])
                                         | Q(pk__in=EditionEntry.objects.values("result_id"))
                                         | own_rehearsals(self.request, "submission__")), self.edition())

    def get_serializer_class(self):
        return s.ResultDetailSerializer if self.action == "retrieve" else s.LeaderboardEntrySerializer

    @extend_schema(responses=s.TrialSerializer(many=True), parameters=[FORMAT])
    @action(detail=True, methods=["get"])
    def trials(self, request, pk=None):
        result = self.get_object()
        qs = result.trials.all().order_by("trial")
        page = self.paginate_queryset(qs)
        if page is not None:
            return self.get_paginated_response(s.TrialSerializer(page, many=True).data)
        return Response(s.TrialSerializer(qs, many=True).data)


MINE = OpenApiParameter("mine", bool, description="with a site token: only this site's systems")


@extend_schema_view(list=extend_schema(parameters=[MINE, FORMAT]))
class SystemViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Systems: registered by their sites (`aiperf-runner system add`), or described by an unregistered run."""

    serializer_class = s.SystemSerializer
    filterset_class = filters.SystemFilter
    ordering_fields = ["nodes", "accelerator_count", "created_at", "accelerator_model"]

    def get_queryset(self):
        # Each row lists its live results: one query for the page (or the export), not one per row.
        live = Prefetch("results", to_attr="live_results",
                        queryset=Result.objects.live().order_by("-score_ops").only("pk", "system_id"))
        qs = System.objects.select_related("site").prefetch_related(live).all()
        if self.request.query_params.get("mine") in ("1", "true", "yes") and isinstance(self.request.auth, Site):
            qs = qs.filter(site=self.request.auth, registered=True)
        return qs

    @extend_schema(request=s.SystemRegistrationSerializer, responses={201: s.SystemSerializer})
    def create(self, request, *args, **kwargs):
        form = s.SystemRegistrationSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        system = systems.register(request.auth, dict(form.validated_data))
        return Response(self.get_serializer(system).data, status=status.HTTP_201_CREATED)


class RunViewSet(viewsets.GenericViewSet):
    """Witnessed runs: a run token before the run, receipts for its heartbeats while it runs."""

    lookup_field = "run_id"
    lookup_value_regex = "[0-9a-f]{32}"
    queryset = RunAttempt.objects.none()
    serializer_class = s.RunTokenSerializer

    @extend_schema(request=s.RunRequestSerializer, responses={201: s.RunTokenSerializer, 400: CheckError,
                                                               404: CheckError, 503: CheckError})
    def create(self, request):
        form = s.RunRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        fields = dict(form.validated_data)
        rehearsal = bool(fields.pop("rehearsal", False))
        system = System.objects.filter(pk=fields.pop("system"), site=request.auth, registered=True).first()
        if system is None:
            return Response({"detail": "no such registered system of this site (aiperf-runner system list)",
                             "check": "system"}, status=status.HTTP_404_NOT_FOUND)
        try:
            attempt = witness.issue_token(request.auth, system, fields, rehearsal=rehearsal)
        except witness.WitnessUnavailable as exc:
            # The reason names a file of the server's: for its log, not for the site.
            logger.error("run token refused: %s", exc)
            return Response({"detail": "this service cannot witness runs now (it has no witness key); "
                                       "its maintainers have been told", "check": "witness"},
                            status=status.HTTP_503_SERVICE_UNAVAILABLE)
        return Response({"run_id": attempt.run_id, "token": witness.token_of(attempt),
                         "heartbeat_interval_s": attempt.heartbeat_interval_s,
                         "witness": {"fingerprint": witness.fingerprint(), "public_key": witness.public_key_b64()}},
                        status=status.HTTP_201_CREATED)

    @extend_schema(request=s.HeartbeatSerializer, responses={201: s.ReceiptSerializer, 200: s.ReceiptSerializer,
                                                             403: CheckError, 404: CheckError, 409: CheckError,
                                                             410: CheckError})
    @action(detail=True, methods=["post"])
    def heartbeats(self, request, run_id=None):
        try:
            beat, new = witness.receive_heartbeat(request.auth, str(run_id), request.data)
        except Rejected as exc:
            return Response({"detail": exc.detail, "check": exc.check}, status=exc.status)
        return Response(beat.receipt(), status=status.HTTP_201_CREATED if new else status.HTTP_200_OK)

    # Every receipt of the run at once: no page, no ordering (the schema documented both, and a page the
    # view never gave; seen in the stateful schemathesis run, tests/service/test_schema_regressions.py).
    @extend_schema(responses={200: s.ReceiptSerializer(many=True), 404: CheckError})
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def receipts(self, request, run_id=None):
        attempt = RunAttempt.objects.filter(run_id=run_id).first()
        if attempt is None or attempt.site_id != getattr(request.auth, "pk", None):
            return Response({"detail": "no such run of this site", "check": "run"}, status=status.HTTP_404_NOT_FOUND)
        return Response([h.receipt() for h in attempt.receipts.select_related("attempt")])


class WitnessView(APIView):
    """The service's witness keys: the current one first; retired ones still verify what they signed."""

    @extend_schema(responses=inline_serializer("Witness", {
        "fingerprint": serializers.CharField(help_text="the current witness key (null: none made yet)",
                                             allow_null=True),
        "public_key": serializers.CharField(allow_null=True), "keys": s.WitnessKeySerializer(many=True)}))
    def get(self, request):
        rows = list(WitnessKey.objects.all())
        current = next((k for k in rows if k.retired_at is None), None)
        return Response({"fingerprint": current.fingerprint if current else None,
                         "public_key": current.public_key if current else None,
                         "keys": s.WitnessKeySerializer(rows, many=True).data})


@extend_schema_view(list=extend_schema(parameters=[FORMAT]))
class SiteViewSet(viewsets.ReadOnlyModelViewSet):
    # Its systems and live results counted in the page's one query (api/serializers.py SiteSerializer).
    queryset = Site.objects.prefetch_related("keys").annotate(
        n_systems=Count("systems", distinct=True),
        n_live_results=Subquery(Result.objects.live().filter(site=OuterRef("pk")).order_by().values("site")
                                .annotate(n=Count("pk")).values("n")[:1])).order_by("name")  # GROUP BY drops Meta's
    serializer_class = s.SiteSerializer
    filterset_fields = ["country"]
    ordering_fields = ["name", "country", "created_at"]


@extend_schema_view(list=extend_schema(parameters=[FORMAT]))
class EditionViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Edition.objects.annotate(n_entries=Count("entries")).order_by("-name")  # GROUP BY drops Meta's
    serializer_class = s.EditionSerializer
    ordering_fields = ["name", "frozen_at"]


def own_rehearsals(request: Any, prefix: str = "") -> Q:
    """The rows of the requesting site's rehearsals (`prefix`: the path to the Submission); none for anyone else."""
    site = request.auth if isinstance(request.auth, Site) else None
    return Q(**{f"{prefix}rehearsal": True, f"{prefix}site": site}) if site is not None else Q(pk__in=[])


@extend_schema_view(list=extend_schema(parameters=[FORMAT]))
class SubmissionViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Upload a signed bundle (site token), and follow it through verification. A rehearsal's submission
    is shown to its own site only."""

    # A row reads its evidence and states: fetched for the whole page (or export) at once.
    # Its result's report is not read whole: the checks it failed are picked out by the database.
    # Only the columns a row shows or its standing reads: an export of 10,000 rows spent its time making objects.
    queryset = (Submission.objects.select_related("site", "result").only(*s.SubmissionSerializer.COLUMNS)
                .prefetch_related(Prefetch("evidence", Evidence.objects.only("submission_id", "trial"),
                                           to_attr="evidence_list"),
                                  Prefetch("states", StateEvidence.objects.only("submission_id", "sha256"),
                                           to_attr="states_list")))
    serializer_class = s.SubmissionSerializer
    filterset_class = filters.SubmissionFilter
    ordering_fields = ["created_at", "status"]
    parser_classes = [MultiPartParser, FormParser]

    def get_queryset(self):
        return super().get_queryset().filter(Q(rehearsal=False) | own_rehearsals(self.request))

    def list(self, request, *args, **kwargs):
        if is_export(request):
            # The whole list (an export): its rows written from values(), the same rows as a page's.
            return Response(exports.submission_rows(self.filter_queryset(self.get_queryset()), request,
                                                    objects=request.query_params.get("format") != "csv"))
        return super().list(request, *args, **kwargs)

    @extend_schema(
        request=s.SubmissionUploadSerializer,
        responses={201: s.SubmissionSerializer, 200: OpenApiResponse(s.SubmissionSerializer, "the same bundle "
                   "was uploaded before: the existing submission"), 400: CheckError, 403: CheckError,
                   413: CheckError, 429: CheckError, 507: CheckError},
    )
    def create(self, request, *args, **kwargs):
        limit = settings.AIPERF_MAX_UPLOAD_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit + 64 * 1024:  # refuse before reading the body; the multipart envelope is small
            return self._refused(intake.too_large(length))
        try:
            limits.check_daily_quota(request.auth)
            with limits.upload_slot(request.auth):
                return self._receive(request)
        except Rejected as exc:
            return self._refused(exc)

    def _receive(self, request) -> Response:
        unknown = s.unknown_fields(request.data, s.SubmissionUploadSerializer().fields)
        if unknown:  # a misspelt 'rehearsal' must not submit the run for the list
            raise ValidationError(unknown)  # answered as every refused form is (api/exceptions.py)
        upload = request.data.get("bundle") if hasattr(request.data, "get") else None
        if upload is None or not hasattr(upload, "chunks"):
            return Response({"detail": "send the bundle as the multipart file field 'bundle'", "check": "request"},
                            status=status.HTTP_400_BAD_REQUEST)
        received = intake.receive(request.auth, upload, rehearsal=s.flag(request.data.get("rehearsal")))
        data = self.get_serializer(received.submission).data
        return Response(data, status=status.HTTP_201_CREATED if received.created else status.HTTP_200_OK)

    @extend_schema(request=inline_serializer("EvidenceUpload", {
        "trial": serializers.CharField(help_text="a challenged trial"),
        "weights": serializers.FileField(help_text="its trials/<id>/weights.safetensors")}),
        responses={201: s.SubmissionSerializer, 400: CheckError, 403: CheckError, 404: CheckError, 413: CheckError})
    @action(detail=True, methods=["post"], parser_classes=[MultiPartParser, FormParser])
    def evidence(self, request, pk=None):
        """Upload a challenged trial's weights (the site that submitted it); the audit starts once all are in."""
        return self._answer(request, "weights", "trial", audit.receive_evidence)

    @extend_schema(request=inline_serializer("StateUpload", {
        "sha256": serializers.CharField(help_text="a committed state the audit asked for (the submission's `states`)"),
        "state": serializers.FileField(help_text="its trials/<id>/states/<sha256>.safetensors")}),
        responses={201: s.SubmissionSerializer, 400: CheckError, 403: CheckError, 404: CheckError, 413: CheckError})
    @action(detail=True, methods=["post"], parser_classes=[MultiPartParser, FormParser])
    def states(self, request, pk=None):
        """Upload a committed training state the audit re-executes from or to (the site that submitted it)."""
        return self._answer(request, "state", "sha256", audit.receive_state)

    def _answer(self, request, file_field: str, name_field: str, receive: Any) -> Response:
        """One upload answering the challenge: `receive(submission, name, upload)`; the audit is queued once
        everything asked for is in."""
        sub = self.get_object()
        if sub.site_id != getattr(request.auth, "pk", None):
            raise PermissionDenied("only the site that submitted it may answer its challenge")
        upload = request.data.get(file_field) if hasattr(request.data, "get") else None
        if upload is None or not hasattr(upload, "chunks"):
            return Response({"detail": f"send the {file_field} as the multipart file field '{file_field}', and "
                                       f"'{name_field}'", "check": "request"}, status=status.HTTP_400_BAD_REQUEST)
        try:
            receive(sub, str(request.data.get(name_field, "")), upload)
        except Rejected as exc:
            return self._refused(exc)
        if audit.complete(sub):
            tasks.enqueue_audit(sub.pk)
        # Read again with the view's prefetches: refresh_from_db() would keep the evidence and states listed
        # before this upload (the prefetched lists), and the answer would leave the file just received out.
        sub = self.get_queryset().get(pk=sub.pk)
        return Response(self.get_serializer(sub).data, status=status.HTTP_201_CREATED)

    @staticmethod
    def _refused(exc: Rejected) -> Response:
        return Response({"detail": exc.detail, "check": exc.check}, status=exc.status)


class SiteKeyViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Public keys of the sites. A site registers its own with its token (`aiperf-runner register`)."""

    queryset = SiteKey.objects.select_related("site").all()
    serializer_class = s.SiteKeySerializer
    filterset_class = filters.SiteKeyFilter

    @extend_schema(responses={201: s.SiteKeySerializer, 200: OpenApiResponse(s.SiteKeySerializer,
                   "already registered to this site"), 409: OpenApiTypes.OBJECT})
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        public = serializer.validated_data["public_key"]
        existing = SiteKey.objects.filter(public_key=public).first()
        if existing is not None:
            if existing.site_id != request.auth.pk:
                return Response({"detail": "this key is registered to another site", "check": "key"},
                                status=status.HTTP_409_CONFLICT)
            if existing.revoked:
                return Response({"detail": f"key {existing.fingerprint} was revoked and cannot be registered again",
                                 "check": "revoked_key"}, status=status.HTTP_409_CONFLICT)
            return Response(self.get_serializer(existing).data, status=status.HTTP_200_OK)
        try:
            key = SiteKey.objects.create(site=request.auth, public_key=public,
                                         fingerprint=spec_keys.fingerprint(base64.b64decode(public)),
                                         label=serializer.validated_data.get("label", ""))
        except IntegrityError:
            raise ValidationError({"public_key": ["already registered"]}) from None
        return Response(self.get_serializer(key).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.SiteKeySerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        key = self.get_object()
        if key.site_id != request.auth.pk:
            raise PermissionDenied("a site can revoke only its own keys")
        if key.revoked_at is None:
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at"])
        return Response(self.get_serializer(key).data)
