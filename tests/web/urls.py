"""The site's pages at the root, then everything else of server/urls.py (the API, admin, health).

The web tests use this URLconf so that they test leaderboard/site whether or not server/urls.py
already includes it (first match wins; the names resolve to the same paths either way).
"""

from django.urls import include, path

from server import urls as server_urls

urlpatterns = [path("", include("leaderboard.site.urls")), *server_urls.urlpatterns]
