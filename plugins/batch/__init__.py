"""Batches: a group of jobs followed as one, with callback jobs when it is complete (every job succeeded or failed),
when it succeeded (every job succeeded) and when a job of it died, each enqueued exactly once (Sidekiq Pro's
batches, on public hooks).

    from kiq.plugins.batch import Batch

    batch = Batch("import", on_success=(Notify, [user_id]), on_complete=Report)
    with batch:
        for row in rows:
            ImportRow.perform_async(row)
    batch.status()                                   # total, pending, failures, complete, success, ...

Enable it with ``plugins = ["batch"]`` in the workers. ``kiq batches`` lists them. See the README, "Batches".
"""

from __future__ import annotations

from . import aio
from .batch import Batch, BatchError
from .callbacks import Callback
from .keys import EVENTS
from .plugin import BatchPlugin
from .status import BatchStatus, batches, status

__all__ = ["EVENTS", "Batch", "BatchError", "BatchPlugin", "BatchStatus", "Callback", "aio", "batches", "status"]
