"""Jobs and a plugin for tests/plugins/metrics (``-r tests.jobs.operations``): jobs that succeed or fail, and a
heartbeat that a test can freeze (``--plugins tests.jobs.operations:FreezableHeartbeat``)."""

from __future__ import annotations

import json
import os
import time

import kiq

FREEZE_FILE = "OPS_TEST_FREEZE_FILE"  # the environment variable naming the freeze file (no KIQ_*: no setting)


class Fine(kiq.Job):
    kiq_name = "OpsFine"

    def perform(self, seconds: float = 0.0) -> None:
        if seconds:
            time.sleep(seconds)


STARTS = "ops-test:starts"  # LIST of JSON {"pid", "jid"}: one per start of a Recorded job


class Recorded(kiq.Job):
    """Records which process started it, then sleeps ``seconds``."""

    kiq_name = "OpsRecorded"

    def perform(self, seconds: float) -> None:
        kiq.default_config().redis.rpush(STARTS, json.dumps({"pid": os.getpid(), "jid": self.jid}))
        time.sleep(seconds)


class Broken(kiq.Job):
    kiq_name = "OpsBroken"
    kiq_options = {"retry": False}

    def perform(self) -> None:
        raise ValueError("broken on purpose")


class FreezableHeartbeat:
    """Blocks the worker's heartbeat loop (inside its ``kiq_heartbeat`` hook) while the file named by the
    environment's ``OPS_TEST_FREEZE_FILE`` exists: a stuck heartbeat, as a hung call in a plugin makes one."""

    @kiq.hookimpl
    def kiq_heartbeat(self, config: kiq.Config) -> None:
        path = os.environ.get(FREEZE_FILE)
        while path and os.path.exists(path):
            time.sleep(0.05)


class ShortWalk(kiq.IterableJob):
    """Walks ``range(count)``, 10 ms an item, pushed again every 0.1 s of runtime: an interruption every ~10 items."""

    kiq_name = "OpsShortWalk"
    max_iteration_runtime = 0.1

    def build_enumerator(self, count: int, *, cursor: int | None) -> object:
        return ((item, item) for item in range(cursor or 0, count))

    def each_iteration(self, item: int, count: int) -> None:
        time.sleep(0.01)
