"""Recompute every stored rank (leaderboard/ranking.py `rerank()`) and drop the cached pages.

    manage.py aiperf_rerank            store the ranks; prints the rows whose rank changed
    manage.py aiperf_rerank --check    change nothing; exit 1 when a stored rank differs from the rule's

The service reranks in the transaction of every change of the list (publish, withdraw, review, audit,
re-ranking under new rules); this is for a change made behind its back (raw SQL, a restored dump).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from leaderboard import listcache, ranking


class Command(BaseCommand):
    help = "Recompute the stored ranks of the live list (--check: only report whether any differs)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a rank differs")

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic():
            changed = ranking.rerank()
            if options["check"]:
                transaction.set_rollback(True)  # the count is all --check wants
        if options["check"]:
            if changed:
                raise CommandError(f"{changed} stored rank(s) differ from the ranking rule; run aiperf_rerank")
            self.stdout.write("stored ranks: 0 differences")
            return
        listcache.bump()  # even with no rank changed: a change behind the service's back may show elsewhere
        self.stdout.write(f"stored ranks: {changed} row(s) changed")
