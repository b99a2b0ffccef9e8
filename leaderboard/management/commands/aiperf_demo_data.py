"""Fill a development database with generated results (devdata/demo.py, in a development checkout).

    manage.py aiperf_demo_data --results 500          replace the demo data with 500 generated results (and 50
                                                      AIPerf-LLM ones: --llm-results)
    manage.py aiperf_demo_data --clear                remove the demo data only
    manage.py aiperf_demo_data --results 10000 --force   also when DEBUG is off (a throwaway database)

Demo data is marked (sites under https://demo.aiperf.invalid/, `"demo": true` in each result's report,
editions noted "[demo]") and never mixes with real data: running the command again replaces it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction


def _demo() -> ModuleType:
    # devdata/ lives beside the service in a checkout, not in the service's image (Dockerfile).
    try:
        return importlib.import_module("devdata.demo")
    except ModuleNotFoundError as exc:
        if exc.name not in ("devdata", "devdata.demo"):
            raise
        raise CommandError("demo data needs the development package devdata/ of a source checkout "
                           "(run manage.py from the repository root)") from None


class Command(BaseCommand):
    help = "Replace the demo data with N generated results (sites, systems, series, reports, trials, editions)."

    def add_arguments(self, parser):
        parser.add_argument("--results", type=int, default=200, help="how many results to generate (default 200)")
        parser.add_argument("--llm-results", type=int, default=None,
                            help="how many AIPerf-LLM results to add (default: a tenth of --results, at most 50)")
        parser.add_argument("--seed", type=int, default=1, help="random seed (the same seed gives the same data)")
        parser.add_argument("--clear", action="store_true", help="only remove the demo data")
        parser.add_argument("--force", action="store_true", help="run even when DEBUG is off")

    def handle(self, *args, **opts):
        if not settings.DEBUG and not opts["force"]:
            raise CommandError("DEBUG is off: this looks like a production database. Demo data is for development; "
                               "pass --force to write it anyway.")
        demo = _demo()
        if opts["clear"]:
            with transaction.atomic():
                n = demo.clear()
            self.stdout.write(f"removed {n} demo result(s)")
            return
        if opts["results"] < 1:
            raise CommandError("--results must be at least 1")
        if opts["llm_results"] is not None and opts["llm_results"] < 0:
            raise CommandError("--llm-results must be at least 0")
        s = demo.generate(opts["results"], seed=opts["seed"], llm_results=opts["llm_results"])
        self.stdout.write(f"demo data: {s.results} results ({s.llm_results} of them AIPerf-LLM), {s.trials} trials, {s.systems} systems, {s.sites} sites, "
                          f"{s.editions} editions in {s.seconds:.1f} s")
