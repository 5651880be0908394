"""Django's database as kiq's tracking database: ``database_url`` turns a ``DATABASES`` entry into the SQLAlchemy
URL the tracking plugin takes (``tracking_database_url``).

Why a URL and not Django's connection: the tracking plugin writes from a background thread in batches, in
transactions of its own, and ``create_task`` commits a task's events before its jobs are pushed. On Django's
connection those writes would join (and commit, or roll back with) whatever transaction the view has open. A
pool of its own on the same database keeps them apart; the tables (``kiq_tracking_*``) sit next to Django's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kiq

DRIVERS = {  # Django's backend -> SQLAlchemy's dialect+driver for the same database and client library
    "django.db.backends.postgresql": "postgresql+psycopg",
    "django.db.backends.sqlite3": "sqlite",
    "django.db.backends.mysql": "mysql+mysqldb",
}
# OPTIONS that Django reads itself; the others are the client library's connection parameters
DJANGO_OPTIONS = frozenset({"isolation_level", "pool", "server_side_binding", "assume_role", "init_command"})


def database_url(database: str | Mapping[str, Any] = "default") -> str:
    """The SQLAlchemy URL of a Django database: an alias of ``settings.DATABASES``, or an entry itself (in
    ``settings.py``: ``KIQ = {"tracking_database_url": database_url(DATABASES["default"])}``)."""
    from sqlalchemy import URL

    entry = _entry(database)
    engine = entry.get("ENGINE", "")
    driver = DRIVERS.get(engine)
    if driver is None:
        raise kiq.ConfigError(f"no tracking database for the Django backend {engine!r}: use {', '.join(DRIVERS)}")
    name = str(entry.get("NAME") or "")
    if driver == "sqlite":
        if not name or name == ":memory:" or name.startswith("file:"):
            raise kiq.ConfigError(f"the tracking database must be a file other processes can open, got {name!r}")
        return URL.create(driver, database=name).render_as_string()
    options = entry.get("OPTIONS") or {}
    query = {key: str(value) for key, value in options.items() if key not in DJANGO_OPTIONS}
    url = URL.create(
        driver,
        username=entry.get("USER") or None,
        password=entry.get("PASSWORD") or None,
        host=entry.get("HOST") or None,
        port=int(entry["PORT"]) if entry.get("PORT") else None,
        database=name or None,
        query=query,
    )
    return url.render_as_string(hide_password=False)


def _entry(database: str | Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(database, str):
        return database
    from django.conf import settings

    if database not in settings.DATABASES:
        raise kiq.ConfigError(f"settings.DATABASES has no database {database!r}")
    entry: Mapping[str, Any] = settings.DATABASES[database]
    return entry
