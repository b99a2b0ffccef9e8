"""Filters of the list endpoints (django-filter)."""

import django_filters as df
from rest_framework.filters import OrderingFilter

from leaderboard.models import Division, Result, SiteKey, Submission, System


class ResultFilter(df.FilterSet):
    workload = df.ChoiceFilter(choices=Result.Workload.choices,
                               help_text="image (AIPerf, the default list) or llm (AIPerf-LLM's own list)")
    division = df.ChoiceFilter(choices=Division.choices)
    accelerator = df.CharFilter(field_name="system__accelerator_model", lookup_expr="icontains",
                                help_text="accelerator model, substring, case-insensitive (e.g. H100)")
    vendor = df.CharFilter(field_name="system__vendor", lookup_expr="iexact")
    country = df.CharFilter(field_name="site__country", lookup_expr="iexact", help_text="ISO 3166-1 alpha-2")
    site = df.CharFilter(field_name="site__name", lookup_expr="iexact")
    system = df.NumberFilter(field_name="system_id")
    preset = df.CharFilter(lookup_expr="iexact")
    precision = df.CharFilter(lookup_expr="iexact")
    level = df.ChoiceFilter(field_name="verification_level", choices=Result.Level.choices)
    rules_version = df.CharFilter(help_text='the rules version a result was verified under, e.g. "3.1"')
    spec_version = df.CharFilter(help_text="the spec (log format) version of the result's run")
    edition = df.CharFilter(method="noop", help_text='a frozen edition, e.g. "2026-11": its entries and their ranks')

    class Meta:
        model = Result
        fields = ["workload", "division", "accelerator", "vendor", "country", "site", "system", "preset", "precision", "level",
                  "rules_version", "spec_version"]

    def noop(self, queryset, name, value):
        return queryset  # the view selects the edition's entries (ranks differ)


class SystemFilter(df.FilterSet):
    accelerator = df.CharFilter(field_name="accelerator_model", lookup_expr="icontains")
    vendor = df.CharFilter(lookup_expr="iexact")
    country = df.CharFilter(field_name="site__country", lookup_expr="iexact")
    site = df.CharFilter(field_name="site__name", lookup_expr="iexact")

    class Meta:
        model = System
        fields = ["accelerator", "vendor", "country", "site", "nodes"]


class SubmissionFilter(df.FilterSet):
    status = df.ChoiceFilter(choices=Submission.Status.choices)
    site = df.CharFilter(field_name="site__name", lookup_expr="iexact")
    run_id = df.CharFilter()

    class Meta:
        model = Submission
        fields = ["status", "site", "run_id"]


class SiteKeyFilter(df.FilterSet):
    """`site` is a site's name here too, as on every list (it was an id)."""

    site = df.CharFilter(field_name="site__name", lookup_expr="iexact")

    class Meta:
        model = SiteKey
        fields = ["site"]


class RankOrderingFilter(OrderingFilter):
    """`ordering=rank` (the default) is division, then the list's rank (`list_rank`, set by the view)."""

    def get_ordering(self, request, queryset, view):
        ordering = super().get_ordering(request, queryset, view) or []
        out: list[str] = []
        for field in ordering:
            if field.lstrip("-") == "rank":
                desc = field.startswith("-")
                out += ["division", "-list_rank" if desc else "list_rank"]
            else:
                out.append(field)
        return out + ["pk"] if out else out

    def get_valid_fields(self, queryset, view, context=None):
        return super().get_valid_fields(queryset, view, context or {}) + [("rank", "rank")]
