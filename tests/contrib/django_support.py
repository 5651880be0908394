"""Django for the tests of kiq.contrib.django: the test project (tests/contrib/django_project) set up once per
session on a fresh SQLite file, and on a private PostgreSQL schema when KIQ_TEST_DATABASE_URL is set; its
databases migrated. Setting Django up applies ``settings.KIQ`` to kiq's process-wide default config: the config
the session had before is put back, so no other test sees it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiq import config as kiq_config
from tests.support import missing_service

SETTINGS = "tests.contrib.django_project.settings"
DATABASES = ["default", "postgres"]  # the aliases the tests run on: SQLite, PostgreSQL


@pytest.fixture(scope="session")
def django_project(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Path]:
    """Django set up with the test project; yields its SQLite file."""
    import django
    from django.core.management import call_command

    sqlite = tmp_path_factory.mktemp("django") / "project.sqlite3"
    variables = {"DJANGO_SETTINGS_MODULE": SETTINGS, "TEST_DJANGO_SQLITE": str(sqlite)}
    if os.environ.get("KIQ_TEST_DATABASE_URL"):
        variables["TEST_DJANGO_POSTGRES"] = request.getfixturevalue("postgres_url")
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    previous_default = kiq_config._default
    try:
        django.setup()
    finally:
        kiq_config._default = previous_default
        for name, value in saved.items():  # Django has read them: the next tests' subprocesses must not
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value
    from django.conf import settings

    for alias in settings.DATABASES:
        call_command("migrate", database=alias, verbosity=0)
    yield sqlite
    from django.db import connections

    connections.close_all()  # before the PostgreSQL schema is dropped


@pytest.fixture(params=DATABASES)
def database(request: pytest.FixtureRequest, django_project: Path) -> str:
    """The alias of a database of the test project: SQLite, then PostgreSQL (when KIQ_TEST_DATABASE_URL is set)."""
    from django.conf import settings

    if request.param not in settings.DATABASES:
        missing_service("KIQ_TEST_DATABASE_URL is not set")
    alias: str = request.param
    return alias
