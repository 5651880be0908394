"""Pushes that wait for the database transaction: a job pushed inside ``transaction.atomic()`` is pushed when the
transaction commits, and never if it rolls back, so a worker never runs a job for rows that do not exist (yet).

The middleware is the outermost of the client chain: a deferred push leaves the chain before any other
middleware ran, and at commit the job goes through the whole chain and the checks once, as a push made then
would (Sidekiq's ``transactional_push!`` defers the whole push the same way). A client middleware can only let a
push go on or drop it, so the deferred ``perform_async`` returns None, not the jid.

A deferred push that runs as an on-commit callback has waited for its database: it pushes, even when that
connection is still inside an atomic block. That happens whenever something other than a real commit runs the
callbacks, e.g. ``TestCase.captureOnCommitCallbacks(execute=True)`` inside the test's own transaction, which
never commits; looking at that connection again would defer the push to itself forever. It still waits for an
open transaction on another database, once per database.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from django.db import connections

import kiq

if TYPE_CHECKING:
    import redis
    from django.db.backends.base.base import BaseDatabaseWrapper

ON_COMMIT = "on_commit"  # the job option: False pushes at once, inside a transaction too

# the databases whose commit the push being made now has waited for (set while a deferred push runs)
_committed: ContextVar[frozenset[str]] = ContextVar("kiq_django_committed", default=frozenset())


class OnCommitMiddleware(kiq.ClientMiddleware):
    """Defers a push made inside an atomic block to ``transaction.on_commit`` (unless the job's ``on_commit``
    option or the ``django_on_commit`` setting is False, or the job belongs to a tracking task)."""

    def call(
        self, job_class: type[kiq.Job] | str, job: dict[str, Any], queue: str, redis: redis.Redis | None
    ) -> kiq.Wrapper:
        wanted = job.pop(ON_COMMIT, True) is not False and self.config.get("django_on_commit")
        # a tracking task's events are committed, in the tracking database, before its jobs are pushed: the task
        # is consistent only if they are pushed now (create_task would record deferred ones as dropped)
        waited = _committed.get()
        transaction = _open_transaction(waited) if wanted and "task_id" not in job else None
        if transaction is None:
            yield
            return
        # at commit the push runs again and looks again: a transaction still open on another database defers it
        # once more, to that one's commit
        done = waited | {transaction.alias}

        def push_at_commit() -> None:
            with _having_waited(done):
                kiq.Client(self.config).push(job)

        transaction.on_commit(push_at_commit)


def _open_transaction(waited: frozenset[str]) -> BaseDatabaseWrapper | None:
    """The first database connection of this thread, other than those in ``waited``, inside an atomic block."""
    open_ones = (c for c in connections.all(initialized_only=True) if c.in_atomic_block and c.alias not in waited)
    return next(open_ones, None)


@contextmanager
def _having_waited(aliases: frozenset[str]) -> Iterator[None]:
    token = _committed.set(aliases)
    try:
        yield
    finally:
        _committed.reset(token)
