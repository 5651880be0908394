"""Jobs for the dashboard's browser tests: each run is recorded in the worker's Redis for the test to read."""

from __future__ import annotations

import time

import kiq

RUNS_KEY = "web-test:runs"  # a list of the labels of the jobs that ran
FIXED_KEY = "web-test:fixed"  # while unset, Fragile fails


class Greet(kiq.Job):
    kiq_name = "Greet"

    def perform(self, label: str, *extra: object) -> None:
        kiq.default_config().redis.rpush(RUNS_KEY, label)


class Fragile(kiq.Job):
    """Fails until the test sets ``FIXED_KEY``; ``retry = 0`` sends it to the dead set at its first failure."""

    kiq_name = "Fragile"
    kiq_options = {"retry": 0, "backtrace": True}

    def perform(self, label: str, *extra: object) -> None:
        if not kiq.default_config().redis.exists(FIXED_KEY):
            raise RuntimeError(f"{label} is broken <b>until fixed</b>")
        kiq.default_config().redis.rpush(RUNS_KEY, label)


class Nap(kiq.Job):
    """Sleeps (in short steps), so it shows on the Busy page while it runs."""

    kiq_name = "WebNap"  # tests.jobs.coroutines has a Nap

    def perform(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.05)


class Brittle(kiq.Job):
    """Always fails, straight to the dead set, keeping no backtrace (no ``backtrace`` option)."""

    kiq_name = "Brittle"
    kiq_options = {"retry": 0}

    def perform(self, label: str) -> None:
        raise ValueError(f"{label}: the warehouse said no")


CANCELLED_KEY = "web-test:cancelled"  # the jids of the SlowExport jobs whose on_cancel ran


class SlowExport(kiq.IterableJob):
    """An iterable job that walks ``count`` items slowly (it shows on the Busy page with its cursor), saving its state
    every 0.2 s, so a Cancel is seen at once."""

    kiq_name = "SlowExport"
    iteration_flush_interval = 0.2

    def build_enumerator(self, count: int, *, cursor: int | None) -> object:
        return kiq.iteration.items(range(count), cursor)

    def each_iteration(self, item: int, count: int) -> None:
        time.sleep(0.02)

    def on_cancel(self) -> None:
        kiq.default_config().redis.rpush(CANCELLED_KEY, self.jid)
