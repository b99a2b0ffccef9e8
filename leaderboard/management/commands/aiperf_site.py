"""Sites and keys for operators and scripts.

    manage.py aiperf_site create NAME --country CC [--url URL]   prints the new site's API token
    manage.py aiperf_site token NAME                             a new API token (the old one stops working)
    manage.py aiperf_site add-key NAME PUBKEY_FILE_OR_TEXT       registers a site public key
    manage.py aiperf_site revoke-key FINGERPRINT
    manage.py aiperf_site list
"""

from __future__ import annotations

from aiperf_runner.spec import keys as spec_keys
from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError, transaction
from django.utils import timezone

from leaderboard.models import Site, SiteKey


class Command(BaseCommand):
    help = "Create sites (printing their API token), rotate tokens, register and revoke site keys."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a site and print its API token")
        create.add_argument("name")
        create.add_argument("--country", required=True, help="ISO 3166-1 alpha-2 code, e.g. CN")
        create.add_argument("--url", default="")
        token = sub.add_parser("token", help="replace a site's API token and print the new one")
        token.add_argument("name")
        add = sub.add_parser("add-key", help="register a public key (site_key.pub or its text) for a site")
        add.add_argument("name")
        add.add_argument("public_key")
        add.add_argument("--label", default="")
        revoke = sub.add_parser("revoke-key", help="revoke a site key by its fingerprint")
        revoke.add_argument("fingerprint")
        sub.add_parser("list", help="list sites and their keys")

    def handle(self, *args, **opts):
        getattr(self, "_" + opts["action"].replace("-", "_"))(opts)

    def _site(self, name: str) -> Site:
        try:
            return Site.objects.get(name=name)
        except Site.DoesNotExist:
            raise CommandError(f"no site named {name!r}") from None

    def _create(self, opts):
        country = opts["country"].strip().upper()
        if len(country) != 2 or not country.isalpha():
            raise CommandError(f"--country must be a two-letter ISO code, got {opts['country']!r}")
        site = Site(name=opts["name"], country=country, url=opts["url"])
        token = site.new_token()
        try:
            with transaction.atomic():
                site.save()
        except IntegrityError:
            raise CommandError(f"a site named {opts['name']!r} exists (`aiperf_site token NAME` makes a new token)") \
                from None
        self.stderr.write(f"created site {site.name!r} ({site.country}); its API token (shown once):")
        self.stdout.write(token)

    def _token(self, opts):
        site = self._site(opts["name"])
        token = site.new_token()
        site.save(update_fields=["token_hash", "token_prefix"])
        self.stderr.write(f"new API token for {site.name!r} (the previous one no longer works):")
        self.stdout.write(token)

    def _add_key(self, opts):
        site = self._site(opts["name"])
        try:
            key = spec_keys.load_public_key(opts["public_key"])
        except (spec_keys.KeyFileError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        fingerprint = spec_keys.fingerprint(key)
        obj, created = SiteKey.objects.get_or_create(
            public_key=spec_keys.public_b64(key),
            defaults={"site": site, "fingerprint": fingerprint, "label": opts["label"]})
        if obj.site_id != site.pk:
            raise CommandError(f"key {fingerprint} is registered to site {obj.site.name!r}")
        self.stdout.write(f"{fingerprint} {'registered' if created else 'already registered'} for {site.name}")

    def _revoke_key(self, opts):
        key = SiteKey.objects.filter(fingerprint=opts["fingerprint"]).select_related("site").first()
        if key is None:
            raise CommandError(f"no key with fingerprint {opts['fingerprint']!r}")
        if key.revoked_at is None:
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at"])
            self.stdout.write(f"revoked {key.fingerprint} of {key.site.name}")
        else:
            self.stdout.write(f"{key.fingerprint} was already revoked on {key.revoked_at:%Y-%m-%d %H:%M} UTC")

    def _list(self, opts):
        for site in Site.objects.prefetch_related("keys"):
            self.stdout.write(f"{site.name} ({site.country}) token {site.token_prefix}...")
            for key in site.keys.all():
                state = f"revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else "active"
                self.stdout.write(f"  {key.fingerprint} {state} {key.label}")
