"""kiq's CPU-bound benchmark job (``python -m bench --processes``): each job spins ``BENCH_SPIN_SECONDS``
(default 0.001) of its own thread's CPU time (``time.thread_time()``) in a tight loop, so a worker process can
run at most ~1/spin jobs per second however many threads it has (the GIL), and ``-p N`` processes ~N times that.
The worker: ``kiq worker -r bench.systems.kiq_cpu -c 10 [-p N]``.
"""

from __future__ import annotations

import os
import time
from importlib.metadata import version

import kiq
from bench.systems.common import Pusher
from bench.systems.kiq_jobs import BenchLatency, BenchNoop

SPIN_SECONDS = float(os.environ.get("BENCH_SPIN_SECONDS", "0.001"))


def spin(seconds: float) -> None:
    """Burn ``seconds`` of this thread's CPU time (not wall time: a thread waiting for the GIL doesn't count)."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


class BenchSpin(kiq.Job):
    kiq_name = "BenchSpin"

    def perform(self, index: int) -> None:
        spin(SPIN_SECONDS)


def pusher() -> Pusher:
    return Pusher(
        version=version("kiq"),
        single=BenchSpin.perform_async,
        bulk=BenchSpin.perform_bulk,
        latency=BenchLatency.perform_async,
    )


__all__ = ["BenchNoop", "BenchSpin", "pusher"]
