"""The I/O-bound drain's job body and its progress counters, shared by every system (stdlib + redis-py only, so
it runs in both venvs).

Every system's I/O job is ``await io_job()``: it counts itself started, awaits ``SECONDS`` (a network call's
worth), and counts itself finished. The harness cannot time this drain by the queue's length alone: a system
that prefetches empties its queue long before its jobs end, and with 1,000 jobs in flight the last ones end at
least ``SECONDS`` after the queue is empty. So the clock stops when ``FINISHED_KEY`` reaches the job count.

The counters live in the worker's memory (a lock and an int: well under a microsecond per job); a daemon thread
adds what changed to Redis every ``FLUSH_EVERY`` seconds, ~200 small writes a second at most, the same for every
system. Counting by INCRBY keeps the keys right even for a system that runs jobs in several processes.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import redis

STARTED_KEY = "bench:io:started"
FINISHED_KEY = "bench:io:finished"
SECONDS = float(os.environ.get("BENCH_IO_SECONDS", "0.05"))  # what each job awaits; the smoke test shortens it
FLUSH_EVERY = 0.005  # seconds: the clock's resolution at both ends of the drain, against a drain of ~1 s or more


class Progress:
    """This process's started/finished counts and the thread that publishes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = 0
        self.finished = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._lock:
            self.started += 1
            if self._thread is None:  # the first job of this process: the worker has imported us by now
                self._thread = threading.Thread(target=self._flush_forever, name="bench-io-flush", daemon=True)
                self._thread.start()

    def finish(self) -> None:
        with self._lock:
            self.finished += 1

    def _flush_forever(self) -> None:
        client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
        sent_started = sent_finished = 0
        while True:
            started, finished = self.started, self.finished  # two int reads; a count one flush late is fine
            if started != sent_started or finished != sent_finished:
                pipe = client.pipeline(transaction=False)
                pipe.incrby(STARTED_KEY, started - sent_started)
                pipe.incrby(FINISHED_KEY, finished - sent_finished)
                pipe.execute()
                sent_started, sent_finished = started, finished
            time.sleep(FLUSH_EVERY)


PROGRESS = Progress()


async def io_job() -> None:
    """The whole job: the same in every system's wrapper."""
    PROGRESS.start()
    await asyncio.sleep(SECONDS)
    PROGRESS.finish()


def no_latency(enqueued_at: float) -> None:
    """The pushers' latency mode, unused by the I/O drain (it measures throughput only)."""
    raise NotImplementedError("the I/O drain has no latency phase")
