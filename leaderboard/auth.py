"""API authentication: `Authorization: Token <site token>` identifies a site. Reads are public."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from leaderboard import limits
from leaderboard.models import Site, hash_token


@dataclass(frozen=True)
class SiteUser:
    """The request.user of a request made with a site token."""

    site: Site
    is_authenticated: bool = True
    is_anonymous: bool = False
    is_staff: bool = False

    def __str__(self) -> str:
        return f"site {self.site.name}"


class SiteTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() not in (b"token", b"bearer"):
            return None
        if limits.token_guesses_exhausted(request):
            # Before the token is looked up: a client guessing tokens gets no answer about them, and no query.
            raise exceptions.Throttled(
                wait=settings.AIPERF_FAILED_TOKENS_WINDOW_S,
                detail=f"too many wrong site tokens from this address (AIPERF_FAILED_TOKENS="
                       f"{settings.AIPERF_FAILED_TOKENS} per {settings.AIPERF_FAILED_TOKENS_WINDOW_S} s); try again later")
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Token <site token>'")
        try:
            token = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("invalid token") from None
        site = Site.objects.filter(token_hash=hash_token(token)).first()
        if site is None:
            limits.count_failed_token(request)
            raise exceptions.AuthenticationFailed("invalid site token")
        return SiteUser(site), site

    def authenticate_header(self, request):
        return self.keyword


class ReadOnlyOrSite(permissions.BasePermission):
    """Anyone may read; writing needs a site token."""

    message = "writing needs a site token: Authorization: Token <site token>"

    def has_permission(self, request, view):
        return request.method in permissions.SAFE_METHODS or isinstance(request.auth, Site)


class SiteTokenScheme(OpenApiAuthenticationExtension):
    target_class = "leaderboard.auth.SiteTokenAuthentication"
    name = "siteToken"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Token <site token>` (from `manage.py aiperf_site create`)"}
