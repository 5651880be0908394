"""Dramatiq's benchmark actors and pusher (Redis broker).
Worker: ``dramatiq bench.systems.dramatiq_jobs --processes 1 --threads 10``."""

# mypy: disable-error-code="untyped-decorator,no-untyped-call,import-untyped"
# (the peers ship without type hints)

from __future__ import annotations

import logging
import time
from importlib.metadata import version

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

from bench.systems.common import LATENCY_KEY, Pusher, redis_url

logging.getLogger("dramatiq").setLevel(logging.WARNING)
dramatiq.set_broker(RedisBroker(url=redis_url()))
_redis = redis.Redis.from_url(redis_url())


@dramatiq.actor(queue_name="default")
def bench_noop(index: int) -> None:
    pass


@dramatiq.actor(queue_name="default")
def bench_latency(enqueued_at: float) -> None:
    started = time.time()
    _redis.rpush(LATENCY_KEY, started - enqueued_at)


def bulk(args: list[list[int]]) -> None:
    dramatiq.group(bench_noop.message(*job_args) for job_args in args).run()


def pusher() -> Pusher:
    return Pusher(version("dramatiq"), bench_noop.send, bulk, bench_latency.send, "bulk = group().run(), no bulk API")
