"""The example's settings: SQLite next to this file, and kiq's settings in ``KIQ``."""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent

SECRET_KEY = "kiq-example-only"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
ROOT_URLCONF = "shop.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "kiq.contrib.django", "shop"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("SHOP_DATABASE", str(HERE.parent / "shop.sqlite3")),
    }
}

KIQ = {
    # a Redis server; without one (no redis_url), kiq starts its embedded one in ./.kiq
    "redis_url": os.environ.get("REDIS_URL", "redis://localhost:6379/0"),
    "queues": ["mail", "default"],  # the worker serves both: the welcome job goes to "mail"
    "require": ["shop.jobs"],  # the modules that define the jobs, imported by the worker
}
