"""The service's witness key: `create` (if missing), `rotate` (a new key; the old one stays valid for
the receipts it signed), `show` (the public keys).

    manage.py aiperf_witness_key create
    manage.py aiperf_witness_key rotate
    manage.py aiperf_witness_key show
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from leaderboard import witness
from leaderboard.models import WitnessKey


class Command(BaseCommand):
    help = "Create, rotate or show the service's witness key (AIPERF_WITNESS_KEY_FILE)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["create", "rotate", "show"])

    def handle(self, *args, **opts):
        action = opts["action"]
        if action == "show":
            rows = list(WitnessKey.objects.all())
            if not rows:
                raise CommandError("no witness key yet: manage.py aiperf_witness_key create")
            for k in rows:
                state = f"retired {k.retired_at:%Y-%m-%d %H:%M}" if k.retired_at else "current"
                self.stdout.write(f"{k.fingerprint}  {k.public_key}  {state}")
            return
        row, new = witness.create_key(rotate=action == "rotate")
        what = "created" if new else "exists"
        self.stdout.write(f"witness key {row.fingerprint} {what}: {witness.key_file()}")
