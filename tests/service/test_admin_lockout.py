"""Admin login guarded against password guessing (django-axes): after AXES_FAILURE_LIMIT wrong
passwords a username is locked out at that address, even with the right password. About 2 s."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db

PASSWORD = "the-right-password-0"


def login(client, password: str, addr: str = "198.51.100.7"):
    return client.post("/admin/login/?next=/admin/", {"username": "admin", "password": password},
                       REMOTE_ADDR=addr)


@pytest.fixture
def admin_user(settings):
    settings.AXES_FAILURE_LIMIT = 3
    return get_user_model().objects.create_superuser("admin", "admin@example.org", PASSWORD)


def test_guessing_locks_the_login_out(client, admin_user):
    for _ in range(2):
        resp = login(client, "guess")
        assert resp.status_code == 200 and "correct username and password" in resp.content.decode()
    locked = login(client, "guess")
    assert locked.status_code == 429 and "locked" in locked.content.decode().lower()
    # Locked out: the right password does not get in either.
    assert login(client, PASSWORD).status_code == 429
    assert "_auth_user_id" not in client.session
    # Another address is not locked (the lock is per username and address).
    assert login(client, PASSWORD, addr="203.0.113.9").status_code == 302


def test_a_right_password_resets_the_count(client, admin_user):
    for _ in range(2):
        login(client, "guess")
    assert login(client, PASSWORD).status_code == 302
    client.logout()
    for _ in range(2):
        assert login(client, "guess").status_code == 200
    assert login(client, PASSWORD).status_code == 302


def test_behind_a_proxy_the_forwarded_address_counts(client, admin_user, settings):
    settings.AIPERF_PROXY_COUNT = 1
    for _ in range(3):
        client.post("/admin/login/", {"username": "admin", "password": "guess"}, REMOTE_ADDR="10.0.0.1",
                    HTTP_X_FORWARDED_FOR="192.0.2.1")
    locked = client.post("/admin/login/", {"username": "admin", "password": PASSWORD}, REMOTE_ADDR="10.0.0.1",
                         HTTP_X_FORWARDED_FOR="192.0.2.1")
    assert locked.status_code == 429
    # The same proxy forwarding another client is not locked out.
    ok = client.post("/admin/login/", {"username": "admin", "password": PASSWORD}, REMOTE_ADDR="10.0.0.1",
                     HTTP_X_FORWARDED_FOR="192.0.2.2")
    assert ok.status_code == 302
