"""kiq's job for bench/latency.py: it records its latency (perform start - push time) in a local file, no Redis
call, so the measure is the fetch path's alone. Ruby Sidekiq's twin: bench/systems/sidekiq_latency.rb."""

from __future__ import annotations

import os
import time

import kiq

_OUT = os.open(os.environ.get("BENCH_LATENCY_FILE", os.devnull), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


class BenchFileLatency(kiq.Job):
    kiq_name = "BenchFileLatency"  # the Ruby class's name: one raw pusher serves both

    def perform(self, pushed_at: float) -> None:
        os.write(_OUT, b"%.6f\n" % (time.time() - pushed_at))  # one write: whole lines from every thread
