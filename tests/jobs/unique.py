"""Jobs for tests/plugins/unique (a worker loads them with ``-r tests.jobs.unique`` and ``KIQ_PLUGINS=unique``).

Every run is written to Redis, where the test reads it back.
"""

from __future__ import annotations

import time
from typing import Any

import kiq

RUNS = "unique-test:runs"  # LIST of jids, one per perform
FAIL = "unique-test:fail"  # while this key exists, FailsWhileFlagged raises
HOLD = "unique-test:hold"  # while this key exists, Held keeps running
LOCKED_AT_START = "unique-test:locked-at-start"  # LIST: "1"/"0", whether the job's lock existed when it started


def _redis():  # type: ignore[no-untyped-def]
    return kiq.default_config().redis


class Once(kiq.Job):
    kiq_name = "UniqueOnce"
    kiq_options = {"unique_for": 60}

    def perform(self, number: int) -> None:
        _redis().rpush(RUNS, self.jid)


class FailsWhileFlagged(kiq.Job):
    kiq_name = "UniqueFailsWhileFlagged"
    kiq_options = {"unique_for": 60, "retry": 3}

    def perform(self, number: int) -> None:
        _redis().rpush(RUNS, self.jid)
        if _redis().exists(FAIL):
            raise RuntimeError("failing while the flag is set")


class StartsUnlocked(kiq.Job):
    kiq_name = "UniqueStartsUnlocked"
    kiq_options = {"unique_for": 60, "unique_until": "start"}

    def perform(self, number: int) -> None:
        _redis().rpush(LOCKED_AT_START, int(_redis().exists(self.job["unique_key"])))


class Dies(kiq.Job):
    kiq_name = "UniqueDies"
    kiq_options = {"unique_for": 60, "retry": 0}

    def perform(self, number: int) -> None:
        raise RuntimeError("dies at once")


class Held(kiq.Job):
    """Runs while the HOLD key exists (at most 30 s); a short lock, for the test that kills its worker."""

    kiq_name = "UniqueHeld"
    kiq_options = {"unique_for": 2}

    def perform(self, *args: Any) -> None:
        _redis().rpush(RUNS, self.jid)
        deadline = time.monotonic() + 30
        while _redis().exists(HOLD) and time.monotonic() < deadline:
            time.sleep(0.05)
