"""kiq on the Django admin, through Django's test client: the admin index lists kiq for staff, and its links
(``/admin/kiq/``, the Dashboard entry) lead to the dashboard, or say how to mount it; others are refused."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kiq
from kiq.contrib.django import apply_settings

pytest_plugins = ["tests.contrib.django_support"]


@pytest.fixture
def django_config(config: kiq.Config, django_project: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[kiq.Config]:
    from kiq.contrib.django import views

    assert config.redis_url is not None
    monkeypatch.setenv("KIQ_REDIS_URL", config.redis_url)  # the dashboard's config: the test's Redis
    views._dashboard.cache_clear()
    yield apply_settings(config, keep={"redis_url"})
    views._dashboard.cache_clear()


def browser(staff: bool | None) -> Any:
    """A test client signed in as a staff user, a user who is not staff, or no one (None)."""
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client()
    if staff is not None:
        client.force_login(User.objects.create(username=f"user-{secrets.token_hex(4)}", is_staff=staff))
    return client


def test_the_admin_index_links_staff_to_the_dashboard(django_config: kiq.Config) -> None:
    staff = browser(staff=True)
    index = staff.get("/admin/")
    assert index.status_code == 200
    page = index.content.decode()
    assert 'href="/admin/kiq/"' in page and 'href="/admin/kiq/dashboard/"' in page  # the app, its Dashboard entry
    app = staff.get("/admin/kiq/")
    assert app.status_code == 302 and app["Location"] == "/admin/kiq/dashboard/"
    dashboard = staff.get("/admin/kiq/dashboard/")
    assert dashboard.status_code == 200 and dashboard["Content-Type"].startswith("text/html"), dashboard.content


def test_without_the_dashboard_mounted_the_admin_links_say_how_to_mount_it(django_config: kiq.Config) -> None:
    from django.test import override_settings

    staff = browser(staff=True)
    with override_settings(ROOT_URLCONF="tests.contrib.django_project.urls_without_dashboard"):
        assert 'href="/admin/kiq/dashboard/"' in staff.get("/admin/").content.decode()
        for path in ("/admin/kiq/", "/admin/kiq/dashboard/"):
            answer = staff.get(path)
            assert answer.status_code == 200 and answer["Content-Type"].startswith("text/html"), path
            assert b"kiq.contrib.django.dashboard_urls" in answer.content, path


def test_users_who_are_not_staff_see_no_kiq_entry(django_config: kiq.Config) -> None:
    user = browser(staff=False)
    assert user.get("/admin/").status_code == 302  # the admin itself sends them to its login
    for path in ("/admin/kiq/", "/admin/kiq/dashboard/"):
        assert user.get(path).status_code == 403, path
    anonymous = browser(staff=None).get("/admin/kiq/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/admin/login/")
