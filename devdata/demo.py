"""Generated demo data for development, screenshots and bench/site_latency.py (`manage.py aiperf_demo_data`).

Sites (with signing keys), systems in families of node counts, submissions, results with their
series, verification reports and trials, and June/November editions — all plausible, none real.
AIPerf-LLM results (devdata/llmdemo.py) are a tenth as many again: each is `spec.verify`'s report of a run
generated with its own figures, signed with its site's key and witnessed by a stand-in for the service.
The figures hang together the way verified ones do: the series sits on `aiperf_runner.spec.scoring`'s
grid and its regulated score is `spec.scoring.regulated_score`; the verification report is one that
`spec.verify` really gave a generated run, with the demo's figures checked again by `spec.rules`
(devdata/reports.py); the Result is filled in by the pipeline's own `result_values`, ranked by
leaderboard/ranking.py, and past editions are frozen by it too.

How demo data is marked (the models have no flag of their own):
- every demo site's `url` starts with DEMO_URL (an `.invalid` host, RFC 2606);
- every demo result's `report` has `"demo": true` (the result page says so);
- every demo edition's `notes` starts with DEMO_NOTE;
- an official demo result's audit is `demo` (Result.Audit.DEMO): its figures have no work behind them to audit;
- every demo run token (RunAttempt: a witnessed result's, or a run abandoned) has `"demo": true` in its statement
  and no signature.
`clear()` removes exactly those; `generate()` replaces any earlier demo data.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiperf_runner
from aiperf_runner.spec import SPEC_VERSION, peaks, scoring
from aiperf_runner.spec import keys as spec_keys
from aiperf_runner.spec import rules as spec_rules
from aiperf_runner.spec import witness as spec_witness
from django.db import transaction
from django.utils import timezone

from devdata import llmdemo, reports
from leaderboard import pipeline, ranking, translog
from leaderboard.models import (
    Edition,
    Result,
    ResultSeries,
    RunAttempt,
    Site,
    SiteKey,
    Submission,
    System,
    Trial,
    failed_of,
    hash_token,
)

DEMO_URL = "https://demo.aiperf.invalid/"
DEMO_NOTE = "[demo]"
DEMO_AUDIT = {"demo": True, "message": "generated demo data: no weights or committed training states exist, "
                                       "so the service had nothing to re-execute"}

# model as the runner records it, devices per node, precision, interconnect, base efficiency, era (years ago)
ACCELERATORS = [
    ("NVIDIA H100 80GB HBM3", 8, "bf16", "InfiniBand NDR 400 Gb/s", 0.21, 2.0, 9, "H100"),
    ("NVIDIA H200", 8, "bf16", "InfiniBand NDR 400 Gb/s", 0.20, 1.2, 5, "H200"),
    ("NVIDIA A100-SXM4-80GB", 8, "bf16", "InfiniBand HDR 200 Gb/s", 0.28, 3.0, 9, "A100"),
    ("NVIDIA A100-SXM4-40GB", 8, "tf32", "InfiniBand HDR 200 Gb/s", 0.33, 3.0, 5, "A100"),
    ("Tesla V100-SXM2-32GB", 8, "fp16", "InfiniBand EDR 100 Gb/s", 0.31, 3.0, 4, "V100"),
    ("NVIDIA L40S", 4, "bf16", "RoCE 100 Gb/s", 0.26, 1.8, 3, "L40S"),
    ("AMD Instinct MI300X", 8, "bf16", "RoCE 400 Gb/s", 0.17, 1.5, 4, "MI300X"),
    ("AMD Instinct MI250X", 8, "fp16", "Slingshot-11", 0.24, 3.0, 3, "MI250X"),
    ("Huawei Ascend 910B", 8, "fp16", "RoCE 200 Gb/s", 0.22, 2.0, 5, "Atlas"),
]
SYSTEM_NAMES = ["Bluefin", "Cobalt", "Driftwood", "Ember", "Fjord", "Granite", "Harbor", "Indigo", "Juniper", "Lantern",
                "Meadow", "Nimbus", "Orchard", "Pebble", "Quill", "Ripple", "Saffron", "Thistle", "Umber", "Willow"]
CPUS = ["AMD EPYC 9654 96-Core Processor", "Intel(R) Xeon(R) Platinum 8480+", "AMD EPYC 7763 64-Core Processor",
        "Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz", "Kunpeng 920"]
PLACES = [("CN", ["Beijing", "Shanghai", "Wuxi", "Shenzhen", "Tianjin", "Hefei", "Guangzhou", "Chengdu", "Hangzhou"], 30),
          ("US", ["Oak Ridge", "Livermore", "Argonne", "Austin", "Berkeley", "Seattle", "Santa Clara", "Boston"], 25),
          ("DE", ["Jülich", "Stuttgart", "Munich", "Dresden"], 6), ("JP", ["Kobe", "Tokyo", "Kashiwa"], 6),
          ("FR", ["Paris", "Grenoble", "Bruyères-le-Châtel"], 4), ("GB", ["Edinburgh", "Bristol", "Cambridge"], 4),
          ("KR", ["Daejeon", "Seoul"], 3), ("IN", ["Pune", "Bengaluru"], 3), ("SG", ["Singapore"], 2),
          ("CH", ["Lugano", "Zurich"], 2), ("FI", ["Kajaani"], 2), ("IT", ["Bologna"], 2), ("ES", ["Barcelona"], 2),
          ("CA", ["Toronto", "Montreal"], 2), ("AU", ["Canberra", "Perth"], 2), ("SE", ["Linköping"], 1),
          ("NL", ["Amsterdam"], 1), ("SA", ["Thuwal"], 1)]
KINDS = ["Supercomputing Center", "AI Lab", "Computing Institute", "Cloud Region", "University HPC",
         "Research Cluster", "National Laboratory"]
SEED_FLOPS = {"imagenet": (23_053_458_315.0, 7_806_583_495.0), "cifar": (1_670_000_000.0, 557_000_000.0),
              "smoke": (2_400_000.0, 800_000.0)}
BUDGETS = (15, 30, 45, 60)


@dataclass
class Summary:
    sites: int
    systems: int
    results: int
    trials: int
    editions: int
    seconds: float
    llm_results: int = 0


def is_demo_result(result: Result) -> bool:
    return bool((result.report or {}).get("demo"))


def clear() -> int:
    """Remove every demo object (and nothing else), and rank what is left; the number of demo results removed."""
    sites = Site.objects.filter(url__startswith=DEMO_URL)
    results = Result.objects.filter(site__in=sites)
    n = results.count()
    Edition.objects.filter(notes__startswith=DEMO_NOTE).delete()
    # Children first, each in one DELETE; then the rows themselves without loading their reports.
    for model in (Trial, ResultSeries):
        model.objects.filter(result__in=results).delete()
    translog.record_removed(list(results.values_list("pk", flat=True)), "removed", "demo data replaced")
    results.only("pk").delete()
    RunAttempt.objects.filter(site__in=sites).delete()
    Submission.objects.filter(site__in=sites).only("pk").delete()
    System.objects.filter(site__in=sites).only("pk").delete()
    SiteKey.objects.filter(site__in=sites).delete()
    sites.delete()
    ranking.rerank()
    return n


def _hex(rng: random.Random, n: int = 64) -> str:
    return f"{rng.getrandbits(4 * n):0{n}x}"


class Generator:
    def __init__(self, n_results: int, seed: int = 1, now: datetime | None = None, llm_results: int | None = None
                 ) -> None:
        self.n = n_results
        self.n_llm = llmdemo.default_count(n_results) if llm_results is None else llm_results
        self.rng = random.Random(seed)
        # The run tokens and the AIPerf-LLM results draw from their own streams, so that adding them left every
        # other figure as it was.
        self.token_rng = random.Random(seed + 0x70CE)
        self.llm_rng = random.Random(seed + 0x11A)
        self.now = now or timezone.now()
        self.span_days = 900 if n_results >= 50 else 400

    # ---- sites and systems ---------------------------------------------------------------------------
    def sites(self) -> list[Site]:
        rng = self.rng
        n_sites = max(3, min(400, round(self.n / 25)))
        weights = [w for _, _, w in PLACES]
        out, names = [], set()
        for i in range(n_sites):
            country, cities, _ = rng.choices(PLACES, weights=weights)[0]
            name = f"Demo {rng.choice(KINDS)} {rng.choice(cities)}"
            if name in names:
                name = f"{name} {i + 1}"
            names.add(name)
            slug = "".join(c.lower() if c.isalnum() else "-" for c in name)
            out.append(Site(name=name, country=country, url=f"{DEMO_URL}{slug}", token_hash=hash_token(uuid.uuid4().hex),
                            token_prefix="demo" + str(i)[:4],
                            created_at=self.now - timedelta(days=self.span_days + rng.uniform(10, 400))))
        return out

    def systems(self, sites: list[Site]) -> list[tuple[System, dict[str, Any]]]:
        rng = self.rng
        out = []
        for site in sites:
            seen: set[str] = set()
            for _ in range(rng.choices([1, 2, 3, 4], weights=[4, 3, 2, 1])[0]):
                model, per_node, precision, interconnect, eff, age, weight, short = rng.choices(
                    ACCELERATORS, weights=[a[6] for a in ACCELERATORS])[0]
                family = rng.choice(SYSTEM_NAMES) if rng.random() > 0.25 else ""
                known = peaks.lookup(model)
                if known is None:
                    raise LookupError(f"{model!r} is not in aiperf_runner.spec.peaks: demo systems need its peaks")
                start = rng.choice([1, 1, 2, 4, 8, 16])
                steps = rng.choices([1, 2, 3, 4, 5, 6], weights=[3, 3, 3, 2, 2, 1])[0]
                cpu = rng.choice(CPUS)
                for k in range(steps):
                    nodes = start * 2 ** k
                    count = nodes * per_node
                    peak = {p: known.peak_flops(p) * count for p in ("fp32", "tf32", "bf16", "fp16")}
                    facts = f"{model}|{count}|{nodes}|{interconnect}|{cpu}"
                    if facts in seen:
                        continue
                    seen.add(facts)
                    memory_gib = (512, 1024, 2048)[int(hashlib.sha256(facts.encode()).hexdigest(), 16) % 3]
                    system = System(site=site, name=f"{family} {short} {nodes}N" if family else "",
                                    vendor=known.vendor, accelerator_model=model, accelerator_count=count, nodes=nodes,
                                    accelerators_per_node=per_node,
                                    interconnect=interconnect if nodes > 1 else "", cpu_model=cpu,
                                    cpu_cores=rng.choice([64, 96, 128, 192]) * nodes, peak_flops=peak,
                                    memory_per_node=memory_gib * 2**30,
                                    identity=hashlib.sha256(facts.encode()).hexdigest(),
                                    # as the demo reports say (a registered template run): approved
                                    registered=True, status=System.Status.APPROVED,
                                    created_at=site.created_at + timedelta(days=rng.uniform(0, 30)))
                    out.append((system, {"precision": precision, "eff": eff, "age": age, "per_node": per_node,
                                         "peak_device": {p: known.peak_flops(p) for p in ("fp32", "tf32", "bf16", "fp16")}}))
        return out

    # ---- one result ------------------------------------------------------------------------------------
    def figures(self, system: System, info: dict[str, Any]) -> dict[str, Any]:
        """The figures of one generated run of `system`: preset, precision, series, trials, ..."""
        rng = self.rng
        preset = rng.choices(["imagenet", "cifar", "smoke"], weights=[78, 14, 8])[0]
        precision = info["precision"] if rng.random() > 0.1 else rng.choice(["fp32", "tf32", "bf16", "fp16"])
        if preset == "imagenet":
            duration = rng.uniform(3600, 4 * 3600) if rng.random() > 0.05 else rng.uniform(1200, 3500)
            accuracy = min(max(rng.gauss(0.755, 0.025), 0.6), 0.83)
        elif preset == "cifar":
            duration = rng.uniform(900, 3 * 3600)
            accuracy = rng.uniform(0.86, 0.95)
        else:
            duration = rng.uniform(120, 900)
            accuracy = rng.uniform(0.7, 0.99)
        duration = round(duration, 1)
        peak = info["peak_device"][precision] * system.accelerator_count
        eff = info["eff"] * rng.uniform(0.8, 1.15) * system.nodes ** -rng.uniform(0.02, 0.06)
        if preset != "imagenet":
            eff *= rng.uniform(0.3, 0.6)
        score = peak * eff
        points = self.series(duration, score, accuracy, stable=rng.random() > 0.08)
        slots = min(system.nodes, 12)
        trials = self.trials(slots, duration, accuracy, preset)
        return {"preset": preset, "precision": precision, "duration": duration, "peak": peak, "points": points,
                "slots": slots, "trials": trials, "epoch_ratio": min(score / peak * rng.uniform(1.05, 1.5), 0.99)}

    @staticmethod
    def values(system: System, g: dict[str, Any], run_id: str, fingerprint: str, started: datetime) -> dict[str, Any]:
        """The Result's values of a generated run (`figures`), as the pipeline stores a verified one."""
        slots, trials = g["slots"], g["trials"]
        run = {
            "run_id": run_id, "runner_version": aiperf_runner.__version__, "spec_version": SPEC_VERSION,
            "rules_version": spec_rules.RULES_VERSION, "rules": "v2", "preset": g["preset"], "precision": g["precision"],
            "created_at": started.timestamp(),
            "config": {"slots": slots, "devices_per_slot": system.accelerator_count // slots, "backend": "slurm"},
            "system": {"nodes": system.nodes, "accelerator_model": system.accelerator_model,
                       "accelerator_count": system.accelerator_count, "cpu_model": system.cpu_model,
                       "cpu_cores": system.cpu_cores},
            "declared_peak_flops": {g["precision"]: g["peak"]},
            "dataset": reports.DATASETS[g["preset"]],
        }
        report = reports.report(
            run, g["points"], trials=len(trials), trials_finished=sum(t["status"] == "finished" for t in trials),
            architectures=len({t["arch_hash"] for t in trials}), epochs=sum(t["epochs"] for t in trials),
            epoch_ratio=g["epoch_ratio"], fingerprint=fingerprint)
        report["demo"] = True
        return pipeline.result_values(report, run)

    def series(self, duration: float, score: float, accuracy: float, stable: bool) -> list[dict[str, float]]:
        rng, sc = self.rng, scoring
        ts = sc.grid(duration)
        tau = duration * (rng.uniform(0.03, 0.09) if stable else rng.uniform(0.35, 0.6))
        tau_a = duration * rng.uniform(0.08, 0.25)
        noise = 0.012 if stable else 0.06
        norm = 1.0 - math.exp(-duration / tau)
        norm_a = 1.0 - math.exp(-duration / tau_a)
        points, best = [], 0.0
        for i, t in enumerate(ts):
            last = i == len(ts) - 1
            s = score if last else score * (1.0 - math.exp(-t / tau)) / norm * (1.0 + rng.gauss(0, noise))
            s = max(s, 0.0)
            a = accuracy * (1.0 - math.exp(-t / tau_a)) / norm_a
            if t < duration * 0.02:
                a = 0.0  # the first epochs have not ended yet
            best = accuracy if last else min(max(best, round(a, 4)), accuracy)
            points.append({"t": t, "work": s * t, "score": s, "regulated": sc.regulated_score(s, best),
                           "max_accuracy": best})
        return points

    def trials(self, slots: int, duration: float, accuracy: float, preset: str) -> list[dict[str, Any]]:
        rng = self.rng
        seed_train, seed_eval = SEED_FLOPS[preset]
        scale = {"imagenet": 1.0, "cifar": 0.5, "smoke": 0.2}[preset]
        startup = min(30.0, duration * 0.01)
        per_slot = rng.randint(2, 4)
        weights = [BUDGETS[min(k, 3)] for k in range(per_slot)]
        raw: list[dict[str, Any]] = []
        for slot in range(slots):
            t = startup + rng.uniform(0, 2)
            usable = duration - t
            total_w = sum(weights) * rng.uniform(0.95, 1.1)
            for k in range(per_slot):
                length = usable * weights[k] / total_w * rng.uniform(0.85, 1.05)
                end = t + length
                last = k == per_slot - 1
                status = "finished"
                if end >= duration or (last and rng.random() < 0.5):
                    end, status = duration, "cancelled"
                elif rng.random() < 0.02:
                    status = "failed"
                budget = max(1, round(BUDGETS[min(k, 3)] * scale))
                epochs = budget if status == "finished" and rng.random() < 0.6 else max(1, round(budget * rng.uniform(0.3, 0.95)))
                raw.append({"slot": slot, "round": k, "started_s": round(t, 2), "ended_s": round(end, 2),
                            "status": status, "epochs": epochs})
                t = end + rng.uniform(0.5, 3.0)
                if t >= duration - 1:
                    break
        raw.sort(key=lambda r: (r["started_s"], r["slot"]))
        finished: dict[int, list[dict[str, Any]]] = {}  # round -> finished trials, as they are proposed
        best_trial = None
        for i, tr in enumerate(raw):
            name = f"t{i:04d}"
            tr["trial"] = name
            k = tr["round"]
            earlier = finished.get(k - 1) or finished.get(k - 2)
            if k == 0 or not earlier:
                tr["parent"], tr["morphisms"], train = "", [], seed_train * rng.uniform(0.98, 1.02)
            else:
                parent = max(rng.sample(earlier, min(3, len(earlier))), key=lambda r: r["best_accuracy"])
                ops = rng.sample(("deeper", "wider", "skip"), rng.choice((1, 1, 2)))
                train = parent["train_flops_per_image"]
                for op in ops:
                    train *= {"deeper": rng.uniform(1.03, 1.12), "wider": rng.uniform(1.2, 1.6),
                              "skip": rng.uniform(1.005, 1.03)}[op]
                tr["parent"], tr["morphisms"] = parent["trial"], ops
            tr["train_flops_per_image"] = train
            tr["eval_flops_per_image"] = train / 2.953
            quality = 0.8 + 0.2 * min(k, 3) / 3
            tr["best_accuracy"] = round(min(accuracy, accuracy * quality * rng.uniform(0.93, 1.0)), 4)
            tr["arch_hash"] = hashlib.sha256(f"{name}{train}".encode()).hexdigest()
            if tr["status"] == "finished":
                finished.setdefault(k, []).append(tr)
                if best_trial is None or k >= best_trial["round"]:
                    best_trial = tr
        if best_trial is not None:
            best_trial["best_accuracy"] = accuracy
        return raw

    # ---- everything ----------------------------------------------------------------------------------
    def run(self) -> Summary:
        start = time.perf_counter()
        rng = self.rng
        sites = Site.objects.bulk_create(self.sites())
        keys, privates = [], []
        for site in sites:
            private = spec_keys.generate_key()
            privates.append(private)
            keys.append(SiteKey(site=site, public_key=spec_keys.public_b64(private),
                                fingerprint=spec_keys.fingerprint(private), label="demo key", created_at=site.created_at))
        created = SiteKey.objects.bulk_create(keys)
        key_of = {k.site_id: k for k in created}
        signing = {k.site_id: (k, p) for k, p in zip(created, privates, strict=True)}
        pairs = self.systems(sites)
        if len(pairs) > self.n:
            pairs = rng.sample(pairs, self.n)
        systems = System.objects.bulk_create([s for s, _ in pairs], batch_size=1000)
        infos = [info for _, info in pairs]
        # every system gets a result, the rest go to systems at random (small systems run more often)
        choice = list(range(len(systems))) + rng.choices(range(len(systems)),
                                                         weights=[1.0 / math.sqrt(s.nodes) for s in systems],
                                                         k=self.n - len(systems))
        rng.shuffle(choice)

        subs, results, points, trials = [], [], [], []
        for idx in choice:
            system, info = systems[idx], infos[idx]
            g = self.figures(system, info)
            # newer accelerators appear later: within their era, more results recently
            span = min(self.span_days, info["age"] * 365)
            verified = self.now - timedelta(days=span * rng.random() ** 0.8, minutes=rng.uniform(5, 600))
            verified = max(verified, system.created_at + timedelta(hours=rng.uniform(2, 48)))
            withdrawn = rng.random() < 0.01
            run_id = uuid.UUID(int=rng.getrandbits(128)).hex
            key = key_of[system.site_id]
            status = Submission.Status.WITHDRAWN if withdrawn else Submission.Status.PUBLISHED
            subs.append(Submission(site_id=system.site_id, key=key, bundle="", sha256=_hex(rng),
                                   size=rng.randint(2, 900) * 1_000_000, run_id=run_id, status=status,
                                   created_at=verified - timedelta(minutes=rng.uniform(1, 30)),
                                   verified_at=verified, attempts=1))
            published_at = verified + timedelta(seconds=rng.uniform(1, 60))
            started = verified - timedelta(seconds=g["duration"] + rng.uniform(60, 3600))
            values = self.values(system, g, run_id, key.fingerprint, started)
            if values["division"] == "official":
                # Generated figures have no weights or committed states to re-execute: the audit says so rather
                # than pass (the demo's own benchmark, submitted by `make demo`, is audited for real).
                values.update(audit=Result.Audit.DEMO, audit_report=DEMO_AUDIT)
            results.append(Result(site_id=system.site_id, system=system, run_id=run_id, published=not withdrawn,
                                  verified_at=verified, published_at=published_at,
                                  failed_checks=failed_of(values["report"]), **values))  # bulk_create: no save()
            points.append(g["points"])
            trials.append(g["trials"])
        llm = llmdemo.generate(list(zip(systems, infos, strict=True)), signing, self.n_llm, self.llm_rng, self.now)
        for made in llm:
            if made.result.division == "official":  # as for images: nothing behind the figures to re-execute
                made.result.audit, made.result.audit_report = Result.Audit.DEMO, DEMO_AUDIT
            subs.append(made.submission)
            results.append(made.result)
            points.append(made.points)
            trials.append(made.trials)
        for sub, result in zip(Submission.objects.bulk_create(subs, batch_size=1000), results, strict=True):
            result.submission = sub
        Result.objects.bulk_create(results, batch_size=500)
        ResultSeries.objects.bulk_create((ResultSeries(result=r, points=p) for r, p in zip(results, points, strict=True)),
                                         batch_size=200)
        n_trials = len(Trial.objects.bulk_create(
            (Trial(result=r, **t) for r, ts in zip(results, trials, strict=True) for t in ts), batch_size=2000))
        RunAttempt.objects.bulk_create(self.run_attempts(results), batch_size=1000)
        ranking.rerank()
        translog.record_many(Result.objects.filter(pk__in=[r.pk for r in results]), "accepted")
        editions = self.editions(min((r.published_at for r in results if r.published_at), default=self.now))
        return Summary(len(sites), len(systems), len(results), n_trials, editions, time.perf_counter() - start, len(llm))

    def run_attempts(self, results: list[Result]) -> list[RunAttempt]:
        """The run tokens behind the results, as a system's page counts them: one per witnessed result, submitted,
        and now and then one that was never submitted (a run abandoned), so that attempted >= submitted >= verified.
        The statements say `demo` and carry no signature: the service's witness key signs no generated token."""
        rng = self.token_rng
        out = []
        for r in results:
            if not r.witnessed or r.started_at is None:
                continue
            interval = 60.0
            beats = int(r.duration_s // interval) + 2
            out.append(self._attempt(r.system, r.run_id, r.started_at - timedelta(seconds=rng.uniform(5, 120)),
                                     interval, beats, r.submission, r.precision, r.preset))
            if rng.random() < 0.15:  # a run started before this one and never submitted
                issued = r.started_at - timedelta(days=rng.uniform(8, 30))
                out.append(self._attempt(r.system, uuid.UUID(int=rng.getrandbits(128)).hex, issued, interval,
                                         rng.randint(1, 40), None, r.precision, r.preset))
        return out

    def _attempt(self, system: System, run_id: str, issued: datetime, interval: float, beats: int,
                 submission: Submission | None, precision: str, preset: str) -> RunAttempt:
        statement = {"kind": spec_witness.TOKEN_KIND, "demo": True, "run_id": run_id, "site": system.site_id,
                     "system": system.pk, "preset": preset, "precision": precision, "issued_at": issued.timestamp(),
                     "heartbeat_interval_s": interval}
        return RunAttempt(run_id=run_id, site_id=system.site_id, system=system, statement=statement, signature="",
                          issued_at=issued, heartbeat_interval_s=interval, log_id=_hex(self.token_rng),
                          heartbeats=beats, last_heartbeat_at=issued + timedelta(seconds=interval * (beats - 1)),
                          submission=submission)

    def editions(self, first: datetime) -> int:
        """June and November editions over the span, each holding the demo results published before it."""
        taken = set(Edition.objects.values_list("name", flat=True))
        made = 0
        for year in range(first.year, self.now.year + 1):
            for month, day in ((6, 1), (11, 15)):
                frozen = datetime(year, month, day, 12, tzinfo=UTC)
                name = f"{year}-{month:02d}"
                members = Result.objects.filter(site__url__startswith=DEMO_URL, published_at__lte=frozen)
                if frozen <= first or frozen >= self.now or name in taken or not members.exists():
                    continue
                edition = Edition.objects.create(
                    name=name, title=f"{'June' if month == 6 else 'November'} {year} (demo)",
                    notes=f"{DEMO_NOTE} generated by manage.py aiperf_demo_data.", created_at=frozen)
                ranking.freeze_edition(edition, results=members)
                Edition.objects.filter(pk=edition.pk).update(frozen_at=frozen)  # as if frozen back then
                made += 1
        return made


def generate(n_results: int, seed: int = 1, llm_results: int | None = None) -> Summary:
    """Replace the demo data with `n_results` generated AIPerf results and `llm_results` AIPerf-LLM ones (None:
    llmdemo.default_count) in one transaction."""
    if n_results < 1:
        raise ValueError("--results must be at least 1")
    if llm_results is not None and llm_results < 0:
        raise ValueError("--llm-results must be at least 0")
    with transaction.atomic():
        clear()
        return Generator(n_results, seed, llm_results=llm_results).run()
