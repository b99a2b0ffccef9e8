"""Registered systems for maintainers who work from a shell.

    manage.py aiperf_system list [--pending]
    manage.py aiperf_system approve ID [ID ...] --reason TEXT
    manage.py aiperf_system reject ID [ID ...] --reason TEXT

A decision goes on the system's record with its reason and who made it (`--by`, default the shell
user), and the system's results are re-verified under the new status (Celery).
"""

from __future__ import annotations

import getpass

from django.core.management.base import BaseCommand, CommandError

from leaderboard import systems, tasks
from leaderboard.models import System


class Command(BaseCommand):
    help = "List registered systems; approve or reject them, with a reason (their results are re-verified)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="registered systems, with their status and its reason")
        listing.add_argument("--pending", action="store_true", help="only those waiting for a maintainer")
        for action, what in (("approve", "approve for the official division"), ("reject", "reject")):
            cmd = sub.add_parser(action, help=f"{what} registered systems by id")
            cmd.add_argument("ids", nargs="+", type=int, metavar="ID")
            cmd.add_argument("--reason", required=True, help="why (kept on the system's record and shown with it)")
            cmd.add_argument("--by", default=getpass.getuser(), help="who decides (default: the shell user)")

    def handle(self, *args, **opts):
        if opts["action"] == "list":
            return self._list(opts["pending"])
        ids = opts["ids"]
        found = System.objects.filter(pk__in=ids, registered=True)
        missing = sorted(set(ids) - set(found.values_list("pk", flat=True)))
        if missing:
            raise CommandError(f"no registered system with id {', '.join(map(str, missing))}")
        try:
            changed, submissions = systems.decide(found, opts["action"] == "approve", opts["reason"], opts["by"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        for pk in submissions:
            tasks.verify_submission.delay(pk, reverify=True)
        done = "approved" if opts["action"] == "approve" else "rejected"
        self.stdout.write(f"{changed} system(s) {done} ({len(ids) - changed} already were); "
                          f"{len(submissions)} result(s) queued for re-verification")

    def _list(self, pending: bool) -> None:
        rows = System.objects.filter(registered=True).select_related("site").order_by("pk")
        if pending:
            rows = rows.filter(status=System.Status.PENDING)
        for s in rows:
            reason = f"  ({s.status_reason})" if s.status_reason else ""
            self.stdout.write(f"{s.pk:>6}  {s.status:<9} {s.site.name} / {s}: {s.describe()}{reason}")
