"""Generated demo data for development, screenshots and bench/site_latency.py (`manage.py aiperf_demo_data`).

Sites, systems, keys, submissions, results with their series, verification reports and trials, and
frozen editions — all plausible, none real. The numbers hang together the way verified ones do: the
series sits on `aiperf_runner.spec.scoring`'s grid, the regulated score is `spec.scoring.regulated_score`
of the score and best accuracy, the stability check's value is the spec's coefficient of variation over
the spec's window, and the division and level follow from the checks as in leaderboard/pipeline.py.

How demo data is marked (the models have no flag of their own):
- every demo site's `url` starts with DEMO_URL (an `.invalid` host, RFC 2606);
- every demo result's `report` has `"demo": true` (the result page says so);
- every demo edition's `notes` starts with DEMO_NOTE.
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

from django.db import transaction
from django.utils import timezone

from leaderboard.models import (
    Division,
    Edition,
    EditionEntry,
    Result,
    ResultSeries,
    Site,
    SiteKey,
    Submission,
    System,
    Trial,
    hash_token,
)

DEMO_URL = "https://demo.aiperf.invalid/"
DEMO_NOTE = "[demo]"

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


def is_demo_result(result: Result) -> bool:
    return bool((result.report or {}).get("demo"))


def clear() -> int:
    """Remove every demo object (and nothing else); the number of demo results removed."""
    sites = Site.objects.filter(url__startswith=DEMO_URL)
    results = Result.objects.filter(site__in=sites)
    n = results.count()
    EditionEntry.objects.filter(result__in=results).delete()
    Edition.objects.filter(notes__startswith=DEMO_NOTE).delete()
    Trial.objects.filter(result__in=results).delete()
    ResultSeries.objects.filter(result__in=results).delete()
    # The children are gone: delete without the collector loading every row (PROTECT would still be
    # enforced by the database's foreign keys).
    results._raw_delete(results.db)
    Submission.objects.filter(site__in=sites)._raw_delete(Submission.objects.db)
    System.objects.filter(site__in=sites)._raw_delete(System.objects.db)
    SiteKey.objects.filter(site__in=sites).delete()
    sites.delete()
    return n


def _hex(rng: random.Random, n: int = 64) -> str:
    return f"{rng.getrandbits(4 * n):0{n}x}"


def _insert(model, rows: list[dict[str, Any]], chunk: int = 5000) -> int:
    """INSERT rows (dicts of attname -> value): COPY on PostgreSQL, executemany elsewhere. Much faster than
    bulk_create for the hundreds of thousands of trials of a big demo list. Missing fields take their default."""
    import json

    from django.db import connection
    from django.db.models import JSONField

    pk = model._meta.pk
    fields = [f for f in model._meta.concrete_fields if not f.primary_key or (rows and pk.attname in rows[0])]
    qn = connection.ops.quote_name
    table, columns = qn(model._meta.db_table), ", ".join(qn(f.column) for f in fields)
    defaults = {f.attname: f.get_default() for f in fields}
    json_fields = [i for i, f in enumerate(fields) if isinstance(f, JSONField)]

    def values(row: dict[str, Any], encode) -> list[Any]:
        out = [row[f.attname] if f.attname in row else defaults[f.attname] for f in fields]
        for i in json_fields:
            out[i] = encode(i, out[i])
        return out

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(values(row, lambda i, v: json.dumps(v, separators=(",", ":"))))
        else:
            for start in range(0, len(rows), chunk):
                cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})",
                                   [values(row, lambda i, v: fields[i].get_db_prep_save(v, connection))
                                    for row in rows[start:start + chunk]])
    return len(rows)


def _reserve_ids(model, n: int) -> list[int]:
    """n primary keys for rows inserted with explicit ids (inside the generating transaction)."""
    from django.db import connection

    table, column = model._meta.db_table, model._meta.pk.column
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                           [table, column, n])
            return [row[0] for row in cursor.fetchall()]
        qn = connection.ops.quote_name
        cursor.execute(f"SELECT COALESCE(MAX({qn(column)}), 0) FROM {qn(table)}")
        top = cursor.fetchone()[0]
        return list(range(top + 1, top + 1 + n))


def _check(name: str, threshold: Any, measured: Any, passed: bool, message: str) -> dict[str, Any]:
    return {"name": name, "threshold": threshold, "measured": measured, "passed": bool(passed), "message": message}


class Generator:
    def __init__(self, n_results: int, seed: int = 1, now: datetime | None = None) -> None:
        from aiperf_runner.spec import SPEC_VERSION, peaks, scoring
        from aiperf_runner.spec import rules as spec_rules

        from leaderboard.pipeline import VERIFIER_VERSION

        self.n = n_results
        self.rng = random.Random(seed)
        self.now = now or timezone.now()
        self.peaks, self.scoring, self.spec_rules = peaks, scoring, spec_rules
        self.th = spec_rules.thresholds()
        self.spec_version, self.verifier_version = SPEC_VERSION, VERIFIER_VERSION
        import aiperf_runner

        self.runner_version = aiperf_runner.__version__
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
                known = self.peaks.lookup(model)
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
                    system = System(site=site, name=f"{family} {short} {nodes}N" if family else "",
                                    vendor=known.vendor, accelerator_model=model, accelerator_count=count, nodes=nodes,
                                    interconnect=interconnect if nodes > 1 else "", cpu_model=cpu,
                                    cpu_cores=rng.choice([64, 96, 128, 192]) * nodes, peak_flops=peak,
                                    identity=hashlib.sha256(facts.encode()).hexdigest(),
                                    created_at=site.created_at + timedelta(days=rng.uniform(0, 30)))
                    out.append((system, {"precision": precision, "eff": eff, "age": age, "per_node": per_node,
                                         "peak_device": {p: known.peak_flops(p) for p in ("fp32", "tf32", "bf16", "fp16")}}))
        return out

    # ---- one result ------------------------------------------------------------------------------------
    def result(self, system: System, info: dict[str, Any]) -> dict[str, Any]:
        rng, sc, th = self.rng, self.scoring, self.th
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
        stable = rng.random() > 0.08
        points = self.series(duration, score, accuracy, stable)
        window = sc.series_window(points, th["stability_window"])
        cv = sc.coefficient_of_variation(p["score"] for p in window)
        stable_ok = cv is not None and cv <= th["max_score_cv"] and len(window) >= th["min_stability_points"]
        final = points[-1]
        slots = min(system.nodes, 12)
        trials = self.trials(slots, duration, accuracy, preset)
        epochs = sum(t["epochs"] for t in trials)
        valid = {
            "preset": preset == th["official_preset"], "duration": duration >= th["min_duration_s"],
            "precision": precision in th["precisions"], "accuracy": final["max_accuracy"] >= th["min_max_accuracy"],
        }
        division = Division.OFFICIAL if all(valid.values()) else Division.OPEN
        checks = self.checks(preset, precision, duration, final, cv, stable_ok, len(window), peak, score,
                             slots, len(trials), epochs, valid, system)
        max_score = max(p["score"] for p in points)
        report = {
            "demo": True, "integrity_ok": True, "rules": "v2", "rules_used": "v2", "score_ops": final["score"],
            "regulated_score_ops": final["regulated"], "max_accuracy": final["max_accuracy"], "duration_s": duration,
            "trials_finished": sum(t["status"] == "finished" for t in trials), "epochs": epochs, "checks": checks,
            "run_id": None, "fingerprint": None, "division": str(division), "valid": all(valid.values()),
            "stable": stable_ok, "plausible": max_score <= peak, "spec_version": self.spec_version,
            "rules_version": self.spec_rules.RULES_VERSION,
        }
        return {"preset": preset, "precision": precision, "duration": duration, "points": points, "peak": peak,
                "report": report, "trials": trials, "division": division, "epochs": epochs,
                "level": Result.Level.FULL if report["valid"] and stable_ok else Result.Level.PARTIAL}

    def series(self, duration: float, score: float, accuracy: float, stable: bool) -> list[dict[str, float]]:
        rng, sc = self.rng, self.scoring
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

    def checks(self, preset, precision, duration, final, cv, stable_ok, window_points, peak, score, slots, n_trials,
               epochs, valid, system) -> list[dict[str, Any]]:
        th, rng = self.th, self.rng
        events = 3 + 3 * n_trials + epochs
        val_images = th["imagenet_val_images"] if preset == "imagenet" else 10_000
        train_images = 1_281_167 if preset == "imagenet" else 50_000
        epoch_ratio = min(score / peak * rng.uniform(1.05, 1.5), 0.99)
        stab_msg = (f"coefficient of variation {cv:.4f} of the score over the last {th['stability_window']:.0%} of the "
                    f"run ({window_points} points)" + ("" if stable_ok else f", above {th['max_score_cv']}"))
        return [
            _check("integrity.chain", "intact", events, True, f"hash chain intact over {events} lines"),
            _check("integrity.signature", "signed by the submitting site's registered key", "signed", True,
                   "signature valid (demo data: no real bundle)"),
            _check("integrity.manifest", 0, 0, True, "every file matches its manifest digest"),
            _check("integrity.run", 0, 0, True, "run.json complete and consistent with the log"),
            _check("integrity.versions", {"spec": [self.spec_version], "rules": ["v2", "v1-compat"]},
                   {"spec": self.spec_version, "runner": self.runner_version, "rules": "v2"}, True,
                   f"spec {self.spec_version}, runner {self.runner_version}, rules v2"),
            _check("integrity.schema", 0, 0, True, f"all {events} events match their schema"),
            _check("integrity.graphs", 0, 0, True, f"{n_trials} trials' graphs valid, hashes match the log; "
                                                   "FLOPs recomputed from them"),
            _check("validity.preset", th["official_preset"], preset, valid["preset"],
                   f"preset {preset!r}" + ("" if valid["preset"] else f": only {th['official_preset']!r} is official")),
            _check("validity.duration", th["min_duration_s"], duration, valid["duration"],
                   f"ran {duration:.0f} s" + ("" if valid["duration"] else
                                              f", less than the {th['min_duration_s']:.0f} s required")),
            _check("validity.precision", list(th["precisions"]), precision, valid["precision"], f"precision {precision!r}"),
            _check("validity.accuracy", th["min_max_accuracy"], final["max_accuracy"], valid["accuracy"],
                   f"best validation accuracy {final['max_accuracy']:.4f}"
                   + ("" if valid["accuracy"] else f", below {th['min_max_accuracy']}")),
            _check("validity.full_validation", val_images, 0, True,
                   f"all {epochs} epochs evaluated the full {val_images}-image validation set"),
            _check("validity.complete", True, True, True, "the run finished"),
            _check("stability.score_cv", th["max_score_cv"], cv, stable_ok, stab_msg),
            _check("plausibility.declared_peak", th["max_declared_to_table"], 1.0, True,
                   f"declared {peak:.4g} FLOP/s at {precision}, table {peak:.4g} ({system.accelerator_count} x "
                   f"{system.accelerator_model})"),
            _check("plausibility.score_peak", th["max_score_to_peak"], score / peak, True,
                   f"highest score {score:.4g} OPS is {score / peak:.1%} of the peak {peak:.4g} FLOP/s"),
            _check("plausibility.epoch_rate", th["max_epoch_to_peak"], epoch_ratio, True,
                   f"fastest epoch ran at {epoch_ratio:.1%} of its slot's peak"),
            _check("plausibility.epoch_images", train_images * (1 + th["epoch_images_slack"]) + th["epoch_images_pad"],
                   0, True, f"no epoch trained more than the {train_images}-image training set"),
            _check("plausibility.slot_exclusive", 0, 0, True, "no slot ran two trials at once"),
            _check("plausibility.concurrency", slots, slots, True, f"at most {slots} trials ran at once on {slots} slots"),
            _check("plausibility.timestamps", 0, 0, True,
                   f"timestamps monotonic; trial clocks within {th['clock_skew_s']:g} s of the controller's"),
            _check("plausibility.lifecycle", 0, 0, True,
                   "every trial proposed, started, numbered its epochs and ended in order"),
        ]

    # ---- everything ----------------------------------------------------------------------------------
    def run(self) -> Summary:
        start = time.perf_counter()
        rng = self.rng
        sites = Site.objects.bulk_create(self.sites())
        keys = []
        from aiperf_runner.spec import keys as spec_keys

        for site in sites:
            key = spec_keys.generate_key()
            keys.append(SiteKey(site=site, public_key=spec_keys.public_b64(key), fingerprint=spec_keys.fingerprint(key),
                                label="demo key", created_at=site.created_at))
        SiteKey.objects.bulk_create(keys)
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

        sub_ids, result_ids = _reserve_ids(Submission, self.n), _reserve_ids(Result, self.n)
        subs, results, series, trials = [], [], [], []
        for i, idx in enumerate(choice):
            system, info = systems[idx], infos[idx]
            g = self.result(system, info)
            # newer accelerators appear later: within their era, more results recently
            span = min(self.span_days, info["age"] * 365)
            verified = self.now - timedelta(days=span * rng.random() ** 0.8, minutes=rng.uniform(5, 600))
            verified = max(verified, system.created_at + timedelta(hours=rng.uniform(2, 48)))
            withdrawn = rng.random() < 0.01
            run_id = uuid.UUID(int=rng.getrandbits(128)).hex
            g["report"]["run_id"] = run_id
            status = Submission.Status.WITHDRAWN if withdrawn else Submission.Status.PUBLISHED
            subs.append({"id": sub_ids[i], "site_id": system.site_id, "bundle": "", "sha256": _hex(rng),
                         "size": rng.randint(2, 900) * 1_000_000, "run_id": run_id, "status": str(status),
                         "reasons": [], "created_at": verified - timedelta(minutes=rng.uniform(1, 30)),
                         "updated_at": verified, "verified_at": verified, "attempts": 1})
            rid = result_ids[i]
            results.append({
                "id": rid, "submission_id": sub_ids[i], "site_id": system.site_id, "system_id": system.pk,
                "run_id": run_id, "division": str(g["division"]), "preset": g["preset"], "precision": g["precision"],
                "score_ops": g["report"]["score_ops"], "regulated_score_ops": g["report"]["regulated_score_ops"],
                "max_accuracy": g["report"]["max_accuracy"], "duration_s": g["duration"], "peak_flops": g["peak"],
                "efficiency": g["report"]["score_ops"] / g["peak"], "trials_finished": g["report"]["trials_finished"],
                "epochs": g["epochs"], "rules_version": g["report"]["rules_version"],
                "spec_version": self.spec_version, "runner_version": self.runner_version,
                "verifier_version": self.verifier_version, "verification_level": str(g["level"]),
                "report": g["report"], "published": not withdrawn,
                "published_at": verified + timedelta(seconds=rng.uniform(1, 60)), "verified_at": verified,
                "started_at": verified - timedelta(seconds=g["duration"] + rng.uniform(60, 3600))})
            series.append({"result_id": rid, "points": g["points"]})
            trials.extend({"result_id": rid, **t} for t in g["trials"])
        _insert(Submission, subs)
        _insert(Result, results)
        _insert(ResultSeries, series, chunk=500)
        n_trials = _insert(Trial, trials)
        editions = self.editions(results)
        return Summary(len(sites), len(systems), len(results), n_trials, editions, time.perf_counter() - start)

    def editions(self, results: list[dict[str, Any]]) -> int:
        """June and November editions over the span, each holding the results published before it."""
        first = min((r["published_at"] for r in results), default=self.now)
        taken = set(Edition.objects.values_list("name", flat=True))
        made = 0
        ordered = sorted((r for r in results if r["published"] or r["published_at"]), key=lambda r: r["published_at"])
        for year in range(first.year, self.now.year + 1):
            for month, day in ((6, 1), (11, 15)):
                frozen = datetime(year, month, day, 12, tzinfo=UTC)
                name = f"{year}-{month:02d}"
                if frozen <= first or frozen >= self.now or name in taken:
                    continue
                members = [r for r in ordered if r["published_at"] <= frozen]
                if not members:
                    continue
                edition = Edition.objects.create(
                    name=name, title=f"{'June' if month == 6 else 'November'} {year} (demo)",
                    notes=f"{DEMO_NOTE} generated by manage.py aiperf_demo_data", created_at=frozen, frozen_at=frozen)
                entries = []
                for division in Division.values:
                    rows = sorted((r for r in members if r["division"] == division),
                                  key=lambda r: (-r["score_ops"], r["id"]))
                    rank, last = 0, None
                    for pos, r in enumerate(rows, 1):
                        if r["score_ops"] != last:
                            rank, last = pos, r["score_ops"]
                        entries.append({"edition_id": edition.pk, "result_id": r["id"], "division": division,
                                        "rank": rank, "score_ops": r["score_ops"],
                                        "regulated_score_ops": r["regulated_score_ops"]})
                _insert(EditionEntry, entries)
                made += 1
        return made


def generate(n_results: int, seed: int = 1) -> Summary:
    """Replace the demo data with `n_results` generated results (one transaction)."""
    if n_results < 1:
        raise ValueError("--results must be at least 1")
    with transaction.atomic():
        clear()
        return Generator(n_results, seed).run()
