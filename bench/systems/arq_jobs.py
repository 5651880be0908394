"""arq's benchmark functions, pusher and worker launcher.

Worker: ``python -m bench.systems.arq_jobs`` runs ``arq.run_worker`` with logging at WARNING (the
``arq`` command configures INFO logging, a line per job, and has no option to lower it)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from typing import Any

from arq import create_pool, run_worker
from arq.connections import ArqRedis, RedisSettings

from bench.systems.common import LATENCY_KEY, Pusher, redis_url

CONCURRENT = 100  # no bulk API: "bulk" runs this many enqueue_job calls at once


async def bench_noop(ctx: dict[str, Any], index: int) -> None:
    pass


async def bench_latency(ctx: dict[str, Any], enqueued_at: float) -> None:
    started = time.time()
    await ctx["redis"].rpush(LATENCY_KEY, started - enqueued_at)


class WorkerSettings:
    functions = [bench_noop, bench_latency]
    redis_settings = RedisSettings.from_dsn(redis_url())
    max_jobs = 10


class ArqPusher:
    """The pusher protocol is synchronous; one event loop and pool serve every call."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pool: ArqRedis = self.loop.run_until_complete(create_pool(WorkerSettings.redis_settings))

    def run(self, work: Callable[[], Awaitable[Any]]) -> None:
        self.loop.run_until_complete(work())

    def single(self, index: int) -> None:
        self.run(lambda: self.pool.enqueue_job("bench_noop", index))

    def latency(self, enqueued_at: float) -> None:
        self.run(lambda: self.pool.enqueue_job("bench_latency", enqueued_at))

    def bulk(self, args: list[list[int]]) -> None:
        async def push_all() -> None:
            for start in range(0, len(args), CONCURRENT):
                batch = args[start : start + CONCURRENT]
                await asyncio.gather(*(self.pool.enqueue_job("bench_noop", *a) for a in batch))

        self.run(push_all)


def pusher() -> Pusher:
    arq = ArqPusher()
    return Pusher(version("arq"), arq.single, arq.bulk, arq.latency, "bulk = 100 concurrent enqueue_job")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    run_worker(WorkerSettings)  # type: ignore[arg-type]
