"""Dramatiq's I/O-bound drain actor and pusher (Redis broker with the ``AsyncIO`` middleware).

Worker: ``dramatiq bench.systems.dramatiq_io --processes 1 --threads 1000``. Dramatiq runs an ``async def``
actor on one event loop thread (the AsyncIO middleware), but each worker thread waits on the coroutine it
submitted until it ends: the jobs in flight are at most the worker threads, so the same 1,000 in flight as the
others needs 1,000 threads (``BENCH_IO_CONCURRENCY``). Each thread acknowledges its own message, so the broker's
Redis connection pool must hold as many connections: redis-py's default cap (100) makes acknowledgements fail with
"Too many connections" and wait 5 s to be retried. A broker of its own, so the no-op drain's Dramatiq runs without
the middleware."""

# mypy: disable-error-code="untyped-decorator,no-untyped-call,import-untyped"
# (the peers ship without type hints)

from __future__ import annotations

import logging
import os
from importlib.metadata import version

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware.asyncio import AsyncIO

from bench.systems.common import Pusher, redis_url
from bench.systems.io_done import io_job, no_latency

THREADS = int(os.environ.get("BENCH_IO_CONCURRENCY", "1000"))
SPARE_CONNECTIONS = 50  # the consumer, heartbeat and maintenance use connections besides the worker threads

logging.getLogger("dramatiq").setLevel(logging.WARNING)
broker = RedisBroker(client=redis.Redis.from_url(redis_url(), max_connections=THREADS + SPARE_CONNECTIONS))
broker.add_middleware(AsyncIO())
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="default")
async def bench_io(index: int) -> None:
    await io_job()


def bulk(args: list[list[int]]) -> None:
    dramatiq.group(bench_io.message(*job_args) for job_args in args).run()


def pusher() -> Pusher:
    return Pusher(version("dramatiq"), bench_io.send, bulk, no_latency, "bulk = group().run(), no bulk API")
