"""Celery's benchmark tasks and pusher (Redis broker, no result backend).
Worker: ``celery -A bench.systems.celery_jobs worker -P threads -c 10 -l WARNING``."""

# mypy: disable-error-code="untyped-decorator,no-untyped-call,import-untyped"
# (the peers ship without type hints)

from __future__ import annotations

import time
from importlib.metadata import version

import redis
from celery import Celery

from bench.systems.common import LATENCY_KEY, Pusher, redis_url

app = Celery("bench", broker=redis_url())
_redis = redis.Redis.from_url(redis_url())


@app.task(name="bench_noop")
def bench_noop(index: int) -> None:
    pass


@app.task(name="bench_latency")
def bench_latency(enqueued_at: float) -> None:
    started = time.time()
    _redis.rpush(LATENCY_KEY, started - enqueued_at)


def bulk(args: list[list[int]]) -> None:
    # no bulk API: Celery's advice for many messages is to reuse one producer (connection) for all of them
    with app.producer_or_acquire() as producer:
        for job_args in args:
            bench_noop.apply_async(job_args, producer=producer)


def pusher() -> Pusher:
    return Pusher(version("celery"), bench_noop.delay, bulk, bench_latency.delay, "bulk = apply_async on one producer")
