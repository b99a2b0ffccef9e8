"""The database reads of the pages: the ranked list (live or a frozen edition), filters, sorting, ranks.

Every page issues a fixed number of queries whatever the number of rows: related objects come with
`select_related`, and ranks are read, never computed: the live list's from `Result.rank` (stored by
leaderboard/ranking.py: a result's place in its whole division, even when the list is filtered), a
frozen edition's from its entries.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict

from aiperf_runner.spec.flops import RULES as FLOP_RULES
from django.core.paginator import Page, Paginator
from django.db.models import Count, Exists, F, Max, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.http import QueryDict

from leaderboard import listcache
from leaderboard.models import Division, Edition, EditionEntry, Result, default_rules, public_edition_q

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class ListFigures(TypedDict):
    """The figures of a row as they stand on its list (live, or a frozen edition): see _base."""

    ldivision: str
    lrank: int | None
    lscore: float
    lregulated: float
    ldate: datetime


class EditionFigures(TypedDict):
    n: int
    llm: int
    results: int
    top: float | None
    total: float | None


ListResult: TypeAlias = "WithAnnotations[Result, ListFigures]"

PER_PAGE_CHOICES = (25, 50, 100, 250, 500)
DEFAULT_PER_PAGE = 100
MAX_PER_PAGE_HTML = 500  # "all" is for downloads; the HTML table pages

FILTERS = ("workload", "division", "accelerator", "vendor", "country", "edition", "rules", "version", "all", "review")
WORKLOADS = ("llm",)  # the lists besides the default (AIPerf, images): `?workload=llm` is AIPerf-LLM's
RULES_LISTS = FLOP_RULES  # the FLOP rules: each its own list
REVIEWS = ("pending", "rejected")

# sort key -> (label, ORM ordering ascending, first click descending?)
SORTS: dict[str, tuple[str, list[str], bool]] = {
    "rank": ("Rank", [], False),  # division first, in either direction: see _ordering
    "system": ("System", ["system__name", "system__accelerator_model", "system__nodes"], False),
    "site": ("Site", ["site__name"], False),
    "country": ("Country", ["site__country"], False),
    "accelerator": ("Accelerator", ["system__accelerator_model", "system__accelerator_count"], False),
    "nodes": ("Nodes", ["system__nodes"], True),
    "score": ("Score", ["lscore"], True),
    "regulated": ("Regulated score", ["lregulated"], True),
    "accuracy": ("Best accuracy", ["max_accuracy"], True),
    "loss": ("Best loss", ["best_loss"], False),  # AIPerf-LLM's list shows it in the accuracy's place
    "efficiency": ("Efficiency", ["efficiency"], True),
    "precision": ("Precision", ["precision"], False),
    "trust": ("Trust", ["witnessed", "system__registered", "audit"], True),
    "division": ("Division", ["ldivision"], False),
    "level": ("Verification", ["verification_level"], False),
    "date": ("Date", ["ldate"], True),
}


def visible_results() -> QuerySet[Result]:
    """Results a reader may open: on the live list, in review (so the review is public), waiting for their audit
    (official results join the list once audited), or cited by a frozen edition."""
    # Columns of the row itself and one correlated EXISTS: a page of one result reads a few index entries,
    # not the whole live list (the stored rank_all says "live": Result.objects.listed()).
    cited = EditionEntry.objects.filter(public_edition_q(), result=OuterRef("pk"))
    return Result.objects.filter(
        Q(rank_all__isnull=False)
        | Q(review__in=[Result.Review.PENDING, Result.Review.REJECTED], published=True)
        | Q(audit=Result.Audit.PENDING, division=Division.OFFICIAL, published=True, submission__rehearsal=False)
        | Exists(cited))


def frozen_editions() -> QuerySet[Edition]:
    """The frozen editions a reader may see (an embargoed one is not, until its publication)."""
    return Edition.objects.public()


def previous_ranks(edition: Edition) -> dict[tuple[int, str], int] | None:
    """{(system, division): rank} in the public edition frozen before `edition` (None: it is the first)."""
    before = (frozen_editions().filter(frozen_at__lt=edition.frozen_at).order_by("-frozen_at").first()
              if edition.frozen_at else None)
    if before is None:
        return None
    rows = EditionEntry.objects.filter(edition=before, rank__isnull=False).values_list(
        "result__system_id", "division", "rank")
    return {(system, division): rank for system, division, rank in rows if rank is not None}


def calendar() -> QuerySet[Edition]:
    """The editions to come: not frozen yet, or frozen under embargo; soonest first."""
    return (Edition.objects.exclude(pk__in=Edition.objects.public().values("pk"))
            .order_by(F("submissions_close").asc(nulls_last=True), "name"))


@dataclass
class ListParams:
    """What the URL of a list view says: filters, sort, page. Unknown values are dropped."""

    workload: str = ""  # "" = AIPerf (images); "llm": AIPerf-LLM's list
    division: str = ""
    accelerator: str = ""
    vendor: str = ""
    country: str = ""
    edition: str = ""
    rules: str = ""  # "" = v2; "v1-compat": the v1-compat list
    version: str = ""  # a rules version ("3.1"): the results verified under it (ranks stay the list's)
    all: str = ""  # "1": every result, not only each system's best
    review: str = ""  # "pending" / "rejected": results off the list, waiting for or refused by a maintainer
    sort: str = "rank"
    page: int = 1
    per: int | None = DEFAULT_PER_PAGE  # None: every row (downloads only)

    @classmethod
    def from_query(cls, q: QueryDict, *, edition: str = "", allow_all: bool = False) -> ListParams:
        p = cls()
        workload = q.get("workload", "")
        p.workload = workload if workload in WORKLOADS else ""
        division = q.get("division", "")
        p.division = division if division in Division.values else ""
        p.accelerator = q.get("accelerator", "").strip()[:200]
        p.vendor = q.get("vendor", "").strip()[:100]
        p.country = q.get("country", "").strip().upper()[:2]
        p.edition = edition or q.get("edition", "").strip()[:32]
        rules = q.get("rules", "")
        p.rules = rules if rules in RULES_LISTS[1:] else ""
        p.version = q.get("version", "").strip()[:32]
        p.all = "1" if q.get("all", "") in ("1", "true", "yes", "on") else ""
        review = q.get("review", "")
        p.review = review if review in REVIEWS else ""
        sort = q.get("sort", "rank")
        p.sort = sort if sort.lstrip("-") in SORTS else "rank"
        try:
            p.page = max(int(q.get("page", "1")), 1)
        except ValueError:
            p.page = 1
        per = q.get("per", "")
        if per == "all" and allow_all:
            p.per = None
        else:
            try:
                n = int(per) if per else DEFAULT_PER_PAGE
            except ValueError:
                n = DEFAULT_PER_PAGE
            p.per = min(n, MAX_PER_PAGE_HTML) if n >= 1 else DEFAULT_PER_PAGE
        return p

    def filters(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in FILTERS if getattr(self, k)}

    def query(self, **changes: Any) -> str:
        """The query string of this view with some parameters changed (None removes one)."""
        values: dict[str, Any] = {k: getattr(self, k) for k in FILTERS}
        values.update(sort=self.sort if self.sort != "rank" else "", page=self.page if self.page != 1 else "",
                      per=("all" if self.per is None else (self.per if self.per != DEFAULT_PER_PAGE else "")))
        values.update(changes)
        q = QueryDict(mutable=True)
        for k, v in values.items():
            if v not in (None, ""):
                q[k] = str(v)
        return q.urlencode()


@dataclass
class Row:
    """One line of the list, with the figures as they stand on this list (live or frozen)."""

    result: Result
    rank: int | None
    score: float
    regulated: float

    @property
    def division(self) -> str:
        return getattr(self.result, "ldivision", None) or self.result.division

    @property
    def system(self):
        return self.result.system

    @property
    def site(self):
        return self.result.site


@dataclass
class ListView:
    params: ListParams
    edition: Edition | None
    rows: list[Row]
    page: Page | None
    total: int
    options: dict[str, list[str]] = field(default_factory=dict)


# The columns a list row shows or exports (fewer columns, faster rows).
LIST_FIELDS = ("division", "rank", "rank_all", "rules", "review", "audit", "witnessed", "max_accuracy", "best_loss",
               "workload", "efficiency",
               "peak_flops", "verification_level", "precision", "preset", "duration_s", "rules_version", "verified_at",
               "published_at", "site", "system", "score_ops", "regulated_score_ops", "site__name", "site__country",
               "system__name", "system__vendor", "system__accelerator_model", "system__accelerator_count",
               "system__nodes", "system__cpu_model", "system__registered", "system__status")


def _base(edition: Edition | None, p: ListParams | None = None) -> QuerySet[ListResult]:
    """The rows of a list with the figures as they stand on it: l(ist)division, lrank, lscore, lregulated, ldate.

    By default each system's best result (`rank`); `all`: every result (`rank_all`); `review`: results off
    the list waiting for (or refused by) a maintainer; `rules`: the v1-compat list instead of v2.
    """
    p = p or ListParams()
    field = "rank_all" if p.all else "rank"
    qs = Result.objects.select_related("site", "system").only(*LIST_FIELDS).filter(
        rules=p.rules or default_rules(p.workload))
    if p.review:
        return qs.filter(review=p.review).annotate(
            ldivision=F("division"), lrank=F("rank"), lscore=F("score_ops"), lregulated=F("regulated_score_ops"),
            ldate=Coalesce("published_at", "verified_at"))
    if edition is None:
        # The stored rank says "live" (Result.objects.listed(): rank_all; rank is set on a subset of those):
        # one column, in the partial index the page walks and the count reads alone.
        qs = qs.filter(**{f"{field}__isnull": False}).annotate(ldivision=F("division"), lrank=F(field), lscore=F("score_ops"),
                                lregulated=F("regulated_score_ops"), ldate=Coalesce("published_at", "verified_at"))
    else:
        entries = EditionEntry.objects.filter(edition=edition, result=OuterRef("pk"))
        qs = qs.filter(edition_entries__edition=edition).annotate(
            ldivision=Subquery(entries.values("division")[:1]),
            lrank=Subquery(entries.values(field)[:1]),
            lscore=Subquery(entries.values("score_ops")[:1]),
            lregulated=Subquery(entries.values("regulated_score_ops")[:1]),
            ldate=Coalesce("published_at", "verified_at"))
    # The live list already filters on its rank column: said twice, the planner squares its selectivity
    # and sorts every row instead of walking the rank index.
    return qs if p.all or edition is None else qs.filter(lrank__isnull=False)


def shown_division(p: ListParams) -> str:
    """The division a list view shows: one per table, the official one unless asked (results in review: both)."""
    return p.division or ("" if p.review else Division.OFFICIAL)


def _filtered(qs: QuerySet[ListResult], p: ListParams) -> QuerySet[ListResult]:
    division = shown_division(p)
    if division:
        qs = qs.filter(ldivision=division)
    if p.accelerator:
        qs = qs.filter(system__accelerator_model__iexact=p.accelerator)
    if p.vendor:
        qs = qs.filter(system__vendor__iexact=p.vendor)
    if p.country:
        qs = qs.filter(site__country__iexact=p.country)
    if p.version:
        qs = qs.filter(rules_version=p.version)
    return qs


def _ordering(p: ListParams) -> list[Any]:
    key = p.sort.lstrip("-")
    desc = p.sort.startswith("-")
    if key == "rank":
        return ["ldivision", "-lrank" if desc else "lrank", "pk"]
    out: list[Any] = []
    for name in SORTS[key][1]:
        expr = F(name)
        out.append(expr.desc(nulls_last=True) if desc else expr.asc(nulls_last=True))
    return [*out, "ldivision", "-lscore", "pk"]


def options(base: QuerySet[ListResult]) -> dict[str, list[str]]:
    """The values the filter menus offer: those present on this list (one query)."""
    rows = (base.order_by().values_list("system__accelerator_model", "system__vendor", "site__country",
                                        "rules_version").distinct())
    accelerators, vendors, countries, versions = set(), set(), set(), set()
    for accelerator, vendor, country, version in rows:
        accelerators.add(accelerator)
        vendors.add(vendor)
        countries.add(country)
        versions.add(version)
    return {"accelerator": sorted(v for v in accelerators if v), "vendor": sorted(v for v in vendors if v),
            "country": sorted(v for v in countries if v), "version": sorted((v for v in versions if v), reverse=True)}


def ranked_list(p: ListParams, *, with_options: bool = True) -> ListView:
    """The rows of one list view: the live list or a frozen edition, filtered, sorted and paged."""
    edition = None
    if p.edition:
        edition = frozen_editions().filter(name=p.edition).first()
        if edition is None:
            raise Edition.DoesNotExist(p.edition)
    base = _base(edition, p)
    qs = _filtered(base, p).order_by(*_ordering(p))
    page = None
    if p.per is None:
        results = list(qs)
        total = len(results)
    else:
        paginator = Paginator(qs, p.per)
        page = paginator.get_page(p.page)
        p.page = page.number
        results = list(page.object_list)
        total = paginator.count
    rows = [Row(r, r.lrank, r.lscore, r.lregulated) for r in results]
    menus: dict[str, list[str]] = {}
    if with_options:  # the same for every filter, sort and page of this list: once per list generation
        which = f"options:{edition.pk if edition else ''}:{p.workload}:{p.rules}:{p.all}:{p.review}"
        menus = listcache.cached_value(which, lambda: options(base))
    return ListView(p, edition, rows, page, total, menus)


# ---- other pages ---------------------------------------------------------------------------------

def edition_index() -> list[WithAnnotations[Edition, EditionFigures]]:
    """The frozen editions with the AIPerf list's systems (each system's best entry, as the edition's page lists
    them), top score and total (of the systems' best: a system's repeat runs do not count twice), the AIPerf-LLM
    list's systems (`llm`: its FLOPs are counted by other rules, so never added in) and all results."""
    best = Q(entries__rank__isnull=False, entries__result__workload="image")
    return list(frozen_editions().annotate(
        n=Count("entries", filter=best), results=Count("entries"),
        llm=Count("entries", filter=Q(entries__rank__isnull=False, entries__result__workload="llm")),
        top=Max("entries__score_ops", filter=Q(entries__result__workload="image")),
        total=Sum("entries__score_ops", filter=best)).order_by("-name"))


SHARE_COLUMNS = (("vendor", "system__vendor"), ("country", "site__country"), ("accelerator", "system__accelerator_model"))


def _systems_best(qs: QuerySet[Any], system: str, *facts: str) -> list[tuple[Any, ...]]:
    """(facts..., best score) of each system in `qs` (ranked entries) and each value of `facts` (a system's own facts,
    or the edition): one row a system, however many divisions rank it. One GROUP BY."""
    return list(qs.order_by().values(*facts, system).annotate(best=Max("score_ops")).values_list(*facts, "best"))


def _summed(rows: list[tuple[Any, ...]], key: Any) -> list[tuple[Any, dict[str, Any]]]:
    """{key(row): {n, total, top}} over rows of (facts..., best score)."""
    out: dict[Any, dict[str, Any]] = {}
    for row in rows:
        best = row[-1] or 0.0
        figures = out.setdefault(key(row), {"n": 0, "total": 0.0, "top": None})
        figures["n"] += 1
        figures["total"] += best
        figures["top"] = best if figures["top"] is None else max(figures["top"], best)
    return list(out.items())


@dataclass
class Statistics:
    """The statistics page's figures of one list (AIPerf or AIPerf-LLM: their FLOPs are counted by other rules and
    never summed together), in one division or both: every count and total is of systems, each by its best."""

    shares: dict[str, list[dict[str, Any]]]
    live: dict[str, Any]
    editions: list[dict[str, Any]]
    vendor_editions: list[dict[str, Any]]


def statistics_of(division: str = "", workload: str = "image") -> Statistics:
    live = Result.objects.listed().filter(rank__isnull=False, workload=workload)  # the stored ranks say "live"
    frozen = EditionEntry.objects.filter(public_edition_q(), rank__isnull=False, result__workload=workload)
    if division:
        live, frozen = live.filter(division=division), frozen.filter(division=division)
    systems = _systems_best(live, "system_id", *(column for _, column in SHARE_COLUMNS))
    shares = {}
    for i, (name, _) in enumerate(SHARE_COLUMNS):
        rows = [{"name": value or "unknown", **figures} for value, figures in _summed(systems, lambda r, i=i: r[i])]
        shares[name] = sorted(rows, key=lambda r: (-r["n"], r["name"]))
    summed = dict(_summed(systems, lambda _r: "live"))
    entries = _systems_best(frozen, "result__system_id", "edition__name", "result__system__vendor")
    return Statistics(
        shares=shares, live={"name": "live", **summed.get("live", {"n": 0, "total": 0.0, "top": None})},
        editions=[{"name": name, **figures} for name, figures in sorted(_summed(entries, lambda r: r[0]))],
        vendor_editions=[{"edition": edition, "vendor": vendor or "unknown", "n": figures["n"]} for (edition, vendor),
                         figures in sorted(_summed(entries, lambda r: (r[0], r[1])), key=lambda kv: (kv[0][0], kv[0][1] or ""))])


def reference_efficiency(division: str = "", model: str | None = None) -> list[dict[str, Any]]:
    """Efficiency against peak per accelerator model and precision, from each system's best result on the live
    list (`rank` set; accelerators only): [{model, precision, n (systems), median, best}], most systems first.
    What a system's own efficiency is read against: the list's own results, not a vendor's figure."""
    qs = (Result.objects.listed().filter(rank__isnull=False, efficiency__isnull=False, rules="v2")
          .exclude(system__accelerator_count=0))
    if division:
        qs = qs.filter(division=division)
    if model is not None:
        qs = qs.filter(system__accelerator_model=model)
    groups: dict[tuple[str, str], list[float]] = {}
    for name, precision, efficiency in qs.values_list("system__accelerator_model", "precision", "efficiency"):
        if efficiency is not None:  # filtered out above; said again for the type
            groups.setdefault((name, precision), []).append(float(efficiency))
    rows = [{"model": name, "precision": precision, "n": len(values), "median": statistics.median(values),
             "best": max(values)} for (name, precision), values in groups.items()]
    return sorted(rows, key=lambda r: (-r["n"], r["model"], r["precision"]))
