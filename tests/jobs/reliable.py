"""Jobs and a death recorder for the reliable fetch end-to-end tests (``-r tests.jobs.reliable``).

Every completion and every death is written to Redis, where the test reads it back.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import kiq
from kiq.plugins.tracking import TaskFailure

DONE = "reliable-test:done"  # SET of jids that completed at least once
RUNS = "reliable-test:runs"  # counter of completions (minus the SET's size = duplicates)
RUNS_BY_JID = "reliable-test:runs-by-jid"  # HASH jid -> completions of that job
DEATHS = "reliable-test:deaths"  # LIST of jids the death hook saw
INTERRUPTED = "reliable-test:interrupted"  # SET of jids that ran again after their worker was killed
HOLD = "reliable-test:hold"  # while this key exists, Hold jobs keep running


class Tick(kiq.Job):
    """Takes ``ms`` milliseconds (so a kill finds some in flight), then records its jid."""

    kiq_name = "ReliableTick"

    def perform(self, ms: int) -> None:
        time.sleep(ms / 1000)
        pipe = kiq.default_config().redis.pipeline(transaction=False)
        pipe.sadd(DONE, self.jid)
        pipe.incr(RUNS)
        pipe.hincrby(RUNS_BY_JID, self.jid, 1)
        if self.job.get("interrupted_count"):
            pipe.sadd(INTERRUPTED, self.jid)
        pipe.execute()


class KillsItsWorker(kiq.Job):
    """A poison pill: SIGKILLs the worker process running it, as an out-of-memory kill would."""

    kiq_name = "ReliableKillsItsWorker"

    def perform(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class Hold(kiq.Job):
    """Runs while the HOLD key exists (at most 30 s), then records its jid."""

    kiq_name = "ReliableHold"

    def perform(self) -> None:
        redis = kiq.default_config().redis
        deadline = time.monotonic() + 30
        while redis.exists(HOLD) and time.monotonic() < deadline:
            time.sleep(0.05)
        redis.sadd(DONE, self.jid)


class DeathRecorder:
    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any], exc: BaseException | None, config: kiq.Config) -> None:
        config.redis.rpush(DEATHS, str(job.get("jid")))


@kiq.configure_server
def register_death_recorder(config: kiq.Config) -> None:
    config.plugins.register(DeathRecorder())


class TrackedWork(kiq.Job):
    """A job of a tracked task whose outcome its index decides: index % 10 == 3 is a business failure
    (``failed``), == 7 raises and dies at once (``error``), anything else finishes; each takes ``ms``."""

    kiq_name = "ReliableTrackedWork"
    kiq_options = {"retry": 0}

    def perform(self, index: int, ms: int) -> None:
        time.sleep(ms / 1000)
        if self.job.get("interrupted_count"):
            kiq.default_config().redis.sadd(INTERRUPTED, self.jid)
        if index % 10 == 3:
            raise TaskFailure(f"business failure {index}")
        if index % 10 == 7:
            raise RuntimeError(f"system error {index}")
        kiq.default_config().redis.sadd(DONE, self.jid)


def expected_status(index: int) -> str:
    return {3: "failed", 7: "error"}.get(index % 10, "finished")
