"""Settings of the test project. The tests choose the databases through the environment before Django starts:

- ``TEST_DJANGO_SQLITE``: the SQLite file of the ``default`` database;
- ``TEST_DJANGO_POSTGRES``: optional, a SQLAlchemy URL (with ``options=-csearch_path=...`` for a private schema)
  of PostgreSQL, which becomes the ``postgres`` database;
- ``TEST_DJANGO_REDIS_URL``: optional, the ``redis_url`` of ``settings.KIQ`` (to see that ``kiq`` reads it).
"""

from __future__ import annotations

import os

from sqlalchemy import make_url

from kiq.contrib.django import database_url

SECRET_KEY = "kiq-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
ROOT_URLCONF = "tests.contrib.django_project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "kiq.contrib.django",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["TEST_DJANGO_SQLITE"]}}
if os.environ.get("TEST_DJANGO_POSTGRES"):
    url = make_url(os.environ["TEST_DJANGO_POSTGRES"])
    DATABASES["postgres"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": url.database,
        "USER": url.username,
        "PASSWORD": url.password,
        "HOST": url.host,
        "PORT": url.port,
        "OPTIONS": dict(url.query),
    }

KIQ = {
    # a Redis nobody listens on: the tests give theirs through KIQ_REDIS_URL or an argument, which must win
    "redis_url": os.environ.get("TEST_DJANGO_REDIS_URL", "redis://127.0.0.1:9/0"),
    "queues": ["django"],
    "concurrency": 3,
    "require": ["tests.contrib.django_project.jobs"],
    "plugins": ["tracking"],
    "tracking_database_url": database_url(DATABASES["default"]),
    "tracking_flush_interval": 0.02,
}
