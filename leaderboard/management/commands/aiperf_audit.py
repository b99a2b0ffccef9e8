"""Run (or re-run) the audit of a submission's challenged weights here and now.

    manage.py aiperf_audit --submission N
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from leaderboard import audit
from leaderboard.models import Result, Submission


class Command(BaseCommand):
    help = "Audit a submission's challenged weights (re-evaluation on the preset's validation data)."

    def add_arguments(self, parser):
        parser.add_argument("--submission", type=int, required=True)

    def handle(self, *args, **opts):
        sub = Submission.objects.filter(pk=opts["submission"]).first()
        if sub is None:
            raise CommandError(f"no submission {opts['submission']}")
        if not sub.challenge:
            raise CommandError(f"submission {sub.pk} has no challenge (unwitnessed, or no weights kept)")
        missing = sorted(set(sub.challenge) - set(sub.evidence.values_list("trial", flat=True)))
        if missing:
            raise CommandError(f"submission {sub.pk}: weights not uploaded yet for {', '.join(missing)}")
        state = audit.run(sub.pk, again=True)
        result = Result.objects.filter(submission=sub).first()
        report = (result.audit_report if result else {}) or {}
        for key in ("trials", "segments", "reexecuted"):
            for trial, checks in (report.get(key) or {}).items():
                for c in checks:
                    self.stdout.write(f"{trial} {c['name']:<20} {'pass' if c['passed'] else 'FAIL'}  {c['message']}")
        self.stdout.write(f"audit: {state}")
