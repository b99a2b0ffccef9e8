"""Production's 404 and 500 are the site's own pages (DEBUG off), not Django's bare ones."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import path

from tests.web import urls as site_urls

pytestmark = pytest.mark.django_db


def broken(request):
    raise RuntimeError("a view that fails")


urlpatterns = [path("broken/", broken), *site_urls.urlpatterns]


def test_an_unknown_address_is_the_sites_404(client: Client, settings) -> None:
    settings.DEBUG = False
    resp = client.get("/no/such/page/")
    assert resp.status_code == 404
    text = resp.content.decode()
    assert "Not found · AIPerf" in text and 'class="brand"' in text and "/no/such/page/" in text
    assert '<h1>Not found</h1>' in text and "Page not found" not in text  # Django's own says that


def test_an_unknown_result_is_the_sites_404(client: Client, settings) -> None:
    settings.DEBUG = False
    resp = client.get("/results/999999")
    assert resp.status_code == 404 and "Not found · AIPerf" in resp.content.decode()


def test_a_failing_view_is_the_sites_500_without_the_error(settings) -> None:
    settings.DEBUG = False
    settings.ROOT_URLCONF = __name__
    resp = Client(raise_request_exception=False).get("/broken/")
    assert resp.status_code == 500
    text = resp.content.decode()
    assert "Server error · AIPerf" in text and 'class="brand"' in text
    assert "a view that fails" not in text and "Traceback" not in text
