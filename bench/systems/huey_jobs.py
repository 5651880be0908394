"""huey's benchmark tasks and pusher (RedisHuey).
Worker: ``huey_consumer bench.systems.huey_jobs.huey -w 10 -k thread -q``."""

# mypy: disable-error-code="untyped-decorator,no-untyped-call,import-untyped"
# (the peers ship without type hints)

from __future__ import annotations

import time
from importlib.metadata import version

from huey import RedisHuey

from bench.systems.common import LATENCY_KEY, Pusher, redis_url

huey = RedisHuey("bench", url=redis_url(), results=False)


@huey.task()
def bench_noop(index: int) -> None:
    pass


@huey.task()
def bench_latency(enqueued_at: float) -> None:
    started = time.time()
    huey.storage.conn.rpush(LATENCY_KEY, started - enqueued_at)


def pusher() -> Pusher:
    return Pusher(
        version("huey"),
        bench_noop,
        lambda args: bench_noop.map(tuple(job_args) for job_args in args),
        bench_latency,
        "bulk = task.map(), one push each",
    )
