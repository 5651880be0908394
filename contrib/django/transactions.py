"""Pushes that wait for the database transaction: a job pushed inside ``transaction.atomic()`` is pushed when the
transaction commits, and never if it rolls back, so a worker never runs a job for rows that do not exist (yet).

The middleware is the outermost of the client chain: a deferred push leaves the chain before any other
middleware ran, and at commit the job goes through the whole chain and the checks once, as a push made then
would (Sidekiq's ``transactional_push!`` defers the whole push the same way). A client middleware can only let a
push go on or drop it, so the deferred ``perform_async`` returns None, not the jid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import connections

import kiq

if TYPE_CHECKING:
    import redis
    from django.db.backends.base.base import BaseDatabaseWrapper

ON_COMMIT = "on_commit"  # the job option: False pushes at once, inside a transaction too


class OnCommitMiddleware(kiq.ClientMiddleware):
    """Defers a push made inside an atomic block to ``transaction.on_commit`` (unless the job's ``on_commit``
    option or the ``django_on_commit`` setting is False, or the job belongs to a tracking task)."""

    def call(
        self, job_class: type[kiq.Job] | str, job: dict[str, Any], queue: str, redis: redis.Redis | None
    ) -> kiq.Wrapper:
        wanted = job.pop(ON_COMMIT, True) is not False and self.config.get("django_on_commit")
        # a tracking task's events are committed, in the tracking database, before its jobs are pushed: the task
        # is consistent only if they are pushed now (create_task would record deferred ones as dropped)
        transaction = _open_transaction() if wanted and "task_id" not in job else None
        if transaction is None:
            yield
            return
        # at commit the push runs again and looks again: a transaction still open on another database defers it
        # once more, to that one's commit
        transaction.on_commit(lambda: kiq.Client(self.config).push(job))


def _open_transaction() -> BaseDatabaseWrapper | None:
    """The first database connection of this thread that is inside an atomic block, if any."""
    return next((c for c in connections.all(initialized_only=True) if c.in_atomic_block), None)
