"""kiq's I/O-bound drain job and pusher. Worker: ``kiq worker -r bench.systems.kiq_io -c 10 -a 1000``: the async
job runs on the capsule's event loop, ``-a`` (async_concurrency) of them at once; the 10 processor threads only
fetch and hand over."""

from __future__ import annotations

from importlib.metadata import version

import kiq
from bench.systems.common import Pusher
from bench.systems.io_done import io_job, no_latency


class BenchIO(kiq.Job):
    kiq_name = "BenchIO"

    async def perform(self, index: int) -> None:
        await io_job()


def pusher() -> Pusher:
    return Pusher(version("kiq"), BenchIO.perform_async, BenchIO.perform_bulk, no_latency)
