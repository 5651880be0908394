"""kiq's benchmark jobs and pusher. The worker: ``kiq worker -r bench.systems.kiq_jobs -c 10``.

``BENCH_TRACK=1`` makes the pusher create tracked jobs (the tracking plugin's ``create_task`` for bulk,
``track: True`` for single and latency pushes), so the tracking system measures tracked jobs end to end.
``BENCH_BATCH=1`` makes every push of a pusher run (single, bulk, latency) join one batch: the whole run inside one
``with Batch("bench"):`` block, so the batch system measures batch jobs end to end (the worker runs
``KIQ_PLUGINS=batch``; bench/systems/batch_settle.py times the drain to the last outcome counted in the batch).
"""

from __future__ import annotations

import asyncio
import os
import time
from importlib.metadata import version

import kiq
from bench.systems.common import LATENCY_KEY, Pusher


class BenchNoop(kiq.Job):
    kiq_name = "BenchNoop"

    def perform(self, index: int) -> None:
        pass


class BenchAwait(kiq.Job):
    """The I/O-bound job: awaits ``seconds`` (a network call's worth), on the worker's event loop."""

    kiq_name = "BenchAwait"

    async def perform(self, index: int, seconds: float = 0.05) -> None:
        await asyncio.sleep(seconds)


class BenchLatency(kiq.Job):
    kiq_name = "BenchLatency"

    def perform(self, enqueued_at: float) -> None:
        started = time.time()
        kiq.default_config().redis.rpush(LATENCY_KEY, started - enqueued_at)


def pusher() -> Pusher:
    if os.environ.get("BENCH_BATCH") == "1":
        from kiq.plugins.batch import Batch

        return Pusher(
            version=version("kiq"),
            single=BenchNoop.perform_async,
            bulk=BenchNoop.perform_bulk,
            latency=BenchLatency.perform_async,
            note="every push of a run inside one `with Batch(...)` block",
            block=lambda: Batch("bench"),
        )
    if os.environ.get("BENCH_TRACK") != "1":
        return Pusher(
            version=version("kiq"),
            single=BenchNoop.perform_async,
            bulk=BenchNoop.perform_bulk,
            latency=BenchLatency.perform_async,
        )
    from kiq.plugins.tracking import create_task

    tracked_noop = BenchNoop.set(track=True)
    tracked_latency = BenchLatency.set(track=True)
    return Pusher(
        version=version("kiq"),
        single=tracked_noop.perform_async,
        bulk=lambda args: create_task(BenchNoop, args),
        latency=tracked_latency.perform_async,
        note="bulk = tracking create_task",
    )
