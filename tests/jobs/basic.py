"""Jobs for the worker end-to-end tests: each leaves a trace in the worker's Redis that the test reads back."""

from __future__ import annotations

import time

import kiq


def _redis():  # type: ignore[no-untyped-def]
    return kiq.default_config().redis


class Record(kiq.Job):
    """Counts each run of ``key`` (``HINCRBY performed key 1``) and appends it to the ``order`` list."""

    kiq_name = "Record"

    def perform(self, key: str) -> None:
        pipe = _redis().pipeline(transaction=False)
        pipe.hincrby("performed", key, 1)
        pipe.rpush("order", key)
        pipe.execute()


class Sleepy(kiq.Job):
    """Marks itself started, then sleeps in short steps (so a hard shutdown can interrupt it)."""

    kiq_name = "Sleepy"

    def perform(self, seconds: float) -> None:
        _redis().rpush("started", self.jid)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.05)
        _redis().rpush("finished", self.jid)


class AppendToFile(kiq.Job):
    """After ``seconds``, appends its jid to the file ``path``: a trace that needs no Redis write (for tests where
    Redis refuses writes, e.g. at maxmemory, or loses them, in a failover)."""

    kiq_name = "AppendToFile"

    def perform(self, path: str, seconds: float = 0) -> None:
        time.sleep(seconds)
        with open(path, "a") as out:
            out.write(self.jid + "\n")
