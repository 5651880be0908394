"""taskiq's I/O-bound drain task and pusher (taskiq-redis ``ListQueueBroker``: one Redis list, BRPOP).

Worker: ``taskiq worker bench.systems.taskiq_io:broker --workers 1 --max-async-tasks 1000 --max-prefetch 0
--log-level WARNING``: one worker process (beside taskiq's supervising parent), up to 1,000 tasks awaited at once
and none fetched beyond them; no result backend (taskiq's default), arguments parsed as taskiq does by default."""

from __future__ import annotations

import asyncio
from importlib.metadata import version

from taskiq_redis import ListQueueBroker

from bench.systems.common import Pusher, redis_url
from bench.systems.io_done import io_job, no_latency

CONCURRENT = 100  # no bulk API: "bulk" runs this many kiq() calls at once, as arq's pusher does

broker = ListQueueBroker(url=redis_url(), queue_name="taskiq")


@broker.task(task_name="bench_io")
async def bench_io(index: int) -> None:
    await io_job()


class TaskiqPusher:
    """The pusher protocol is synchronous; one event loop and the started broker serve every call."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(broker.startup())

    def single(self, index: int) -> None:
        self.loop.run_until_complete(bench_io.kiq(index))

    def bulk(self, args: list[list[int]]) -> None:
        async def push_all() -> None:
            for start in range(0, len(args), CONCURRENT):
                await asyncio.gather(*(bench_io.kiq(*a) for a in args[start : start + CONCURRENT]))

        self.loop.run_until_complete(push_all())


def pusher() -> Pusher:
    taskiq = TaskiqPusher()
    return Pusher(
        version("taskiq"), taskiq.single, taskiq.bulk, no_latency, f"bulk = {CONCURRENT} concurrent kiq() calls"
    )
