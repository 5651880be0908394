"""kiq in a Django project (``INSTALLED_APPS += ["kiq.contrib.django"]``).

- kiq's settings come from ``settings.KIQ`` too, between the config file and the environment (``config``); the
  ``kiq`` command reads them when ``DJANGO_SETTINGS_MODULE`` is set (``kiq.contrib.django_settings``);
- a job pushed inside ``transaction.atomic()`` is pushed when the transaction commits, never if it rolls back
  (``OnCommitMiddleware``; ``.set(on_commit=False)`` or ``django_on_commit = False`` to push at once);
- ``python manage.py kiq <command>`` is the ``kiq`` command line with Django set up (``kiq worker``, ``stats``,
  ``web``, ...); ``python manage.py kiq_worker -r myapp.jobs`` is ``kiq worker``;
- ``path("admin/kiq/", include("kiq.contrib.django.urls"))`` serves the tracking endpoints to staff users, and
  ``path("admin/kiq/dashboard/", include("kiq.contrib.django.dashboard_urls"))`` the dashboard (before it); the
  admin index then shows a kiq entry linking to both;
- ``database_url("default")`` turns a ``DATABASES`` entry into a ``tracking_database_url``.

Importing this package imports no model and reads no setting, so ``settings.py`` may use ``database_url``.
"""

from __future__ import annotations

from .config import apply_settings, config
from .databases import database_url
from .plugin import DjangoPlugin
from .transactions import OnCommitMiddleware

__all__ = ["DjangoPlugin", "OnCommitMiddleware", "apply_settings", "config", "database_url"]
