"""RQ's benchmark jobs and pusher. Worker: ``rq worker --worker-class rq.worker.SimpleWorker default``.

RQ has no thread pool: its default Worker forks a process per job; SimpleWorker runs jobs in the worker
process itself, one at a time, which is RQ's fastest single-process mode."""

# mypy: disable-error-code="untyped-decorator,no-untyped-call,import-untyped"
# (the peers ship without type hints)

from __future__ import annotations

import time
from importlib.metadata import version

import redis
from rq import Queue

from bench.systems.common import LATENCY_KEY, Pusher, redis_url

_redis = redis.Redis.from_url(redis_url())
queue = Queue("default", connection=_redis)


def bench_noop(index: int) -> None:
    pass


def bench_latency(enqueued_at: float) -> None:
    started = time.time()
    _redis.rpush(LATENCY_KEY, started - enqueued_at)


BATCH = 1000  # enqueue_many pipelines a batch into one round trip


def bulk(args: list[list[int]]) -> None:
    for start in range(0, len(args), BATCH):
        queue.enqueue_many([Queue.prepare_data(bench_noop, tuple(a)) for a in args[start : start + BATCH]])


def pusher() -> Pusher:
    return Pusher(
        version("rq"),
        lambda index: queue.enqueue(bench_noop, index),
        bulk,
        lambda enqueued_at: queue.enqueue(bench_latency, enqueued_at),
        "bulk = enqueue_many, 1,000 per pipeline",
    )
