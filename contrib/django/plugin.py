"""The kiq plugin that every config of a Django project gets (``apply_settings`` adds it)."""

from __future__ import annotations

import asyncio
from typing import Any

from django.db import connections

import kiq
import kiq.ext

from .transactions import ON_COMMIT, OnCommitMiddleware


class DjangoPlugin:
    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        help = "push jobs pushed inside transaction.atomic() when it commits (false: at once)"
        return [kiq.ext.Setting.boolean("django_on_commit", True, help)]

    @kiq.hookimpl
    def kiq_job_options(self) -> list[str]:
        return [ON_COMMIT]

    @kiq.hookimpl
    def kiq_client_middleware(self, chain: kiq.Chain[kiq.ClientMiddleware]) -> None:
        chain.prepend(OnCommitMiddleware)

    @kiq.hookimpl
    def kiq_server_middleware(self, chain: kiq.Chain[kiq.ServerMiddleware]) -> None:
        chain.prepend(DatabaseConnections)


class DatabaseConnections(kiq.ServerMiddleware):
    """What Django does around a request, around a job: drop the connections that broke or outlived
    ``CONN_MAX_AGE``, so a worker thread that runs jobs for days does not keep using a dead connection."""

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        if _in_event_loop():  # an async job: Django refuses connection work in the loop's thread
            yield
            return
        close_old_connections()
        try:
            yield
        finally:
            close_old_connections()


def close_old_connections() -> None:
    """``django.db.close_old_connections``, except for connections inside an atomic block: a job run in a test's
    transaction (Django's TestCase, kiq.testing's inline mode) must not close it."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
