"""A job for the memory test: takes one big argument, records its length (nothing else is kept), and can stay
running for a while (through the worker's heartbeats, which write the running jobs to Redis)."""

from __future__ import annotations

import time

import kiq


class BigArgument(kiq.Job):
    """Records ``len(blob)`` under ``sizes``, keyed by jid, after ``seconds``."""

    kiq_name = "BigArgument"

    def perform(self, blob: str, seconds: float = 0) -> None:
        time.sleep(seconds)
        kiq.default_config().redis.hset("sizes", self.jid, len(blob))
