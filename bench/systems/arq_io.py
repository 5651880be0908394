"""arq's I/O-bound drain function, pusher and worker launcher.

Worker: ``python -m bench.systems.arq_io`` runs ``arq.run_worker`` at WARNING with ``max_jobs`` =
``BENCH_IO_CONCURRENCY`` (the jobs it awaits at once) and ``keep_result = 0``: arq stores every job's return value
for an hour by default, a Redis write per job that no other system in this drain makes."""

from __future__ import annotations

import asyncio
import logging
import os
from importlib.metadata import version
from typing import Any

from arq import run_worker
from arq.connections import RedisSettings

from bench.systems.arq_jobs import ArqPusher
from bench.systems.common import Pusher, redis_url
from bench.systems.io_done import io_job, no_latency

CONCURRENT = 100  # no bulk API: "bulk" runs this many enqueue_job calls at once (as in the no-op drain)


async def bench_io(ctx: dict[str, Any], index: int) -> None:
    await io_job()


class WorkerSettings:
    functions = [bench_io]
    redis_settings = RedisSettings.from_dsn(redis_url())
    max_jobs = int(os.environ.get("BENCH_IO_CONCURRENCY", "1000"))
    keep_result = 0


def pusher() -> Pusher:
    arq = ArqPusher()

    def bulk(args: list[list[int]]) -> None:
        async def push_all() -> None:
            for start in range(0, len(args), CONCURRENT):
                batch = args[start : start + CONCURRENT]
                await asyncio.gather(*(arq.pool.enqueue_job("bench_io", *a) for a in batch))

        arq.run(push_all)

    return Pusher(
        version("arq"),
        lambda index: arq.run(lambda: arq.pool.enqueue_job("bench_io", index)),
        bulk,
        no_latency,
        f"bulk = {CONCURRENT} concurrent enqueue_job",
    )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    run_worker(WorkerSettings)  # type: ignore[arg-type]
