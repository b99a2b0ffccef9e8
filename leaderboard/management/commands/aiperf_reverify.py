"""Re-verify every result whose verifier version differs from the current one.

    manage.py aiperf_reverify            run the re-verification here, one submission at a time
    manage.py aiperf_reverify --queue    hand them to the Celery workers instead
    manage.py aiperf_reverify --all      every verified result, whatever its verifier version
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from leaderboard import pipeline, tasks
from leaderboard.models import Submission


class Command(BaseCommand):
    help = "Re-verify results verified by another verifier version (or all with --all)."

    def add_arguments(self, parser):
        parser.add_argument("--queue", action="store_true", help="queue Celery tasks instead of running here")
        parser.add_argument("--all", action="store_true", help="every verified result")

    def handle(self, *args, **opts):
        if opts["all"]:
            qs = Submission.objects.filter(status__in=[Submission.Status.VERIFIED, Submission.Status.PUBLISHED])
        else:
            qs = pipeline.needs_reverify()
        ids = list(qs.order_by("pk").values_list("pk", flat=True))
        self.stdout.write(f"{len(ids)} result(s) to re-verify with {pipeline.VERIFIER_VERSION}")
        if opts["queue"]:
            for pk in ids:
                tasks.verify_submission.delay(pk, reverify=True)
            self.stdout.write(f"queued {len(ids)}")
            return
        counts: dict[str, int] = {}
        for pk in ids:
            outcome = pipeline.run(pk, reverify=True)
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
            self.stdout.write(f"submission {pk}: {outcome.status}"
                              + "".join(f"\n  {r['check']}: {r['message']}" for r in outcome.reasons))
        self.stdout.write(", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "nothing to do")
