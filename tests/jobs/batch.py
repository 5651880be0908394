"""Jobs for tests/plugins/batch (a worker loads them with ``-r tests.jobs.batch`` and ``KIQ_PLUGINS=batch``).

Callbacks count themselves in Redis, where the tests read them back.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import kiq
import kiq.ext
from kiq.plugins.batch import Batch

FIRED = "batch-test:fired"  # HASH: "<bid>:<event>" -> runs of that callback
ORDER = "batch-test:order"  # LIST: "<bid>:<event>" as callbacks ran, and "job:<name>" as marked jobs ran
ARGS = "batch-test:args"  # LIST: the JSON of the arguments callbacks got
FAIL = "batch-test:fail"  # while this key exists, Flaky raises
RUNS = "batch-test:runs"  # HASH: jid -> runs (duplicates show as counts above 1)
FAILING_CALLBACK = "batch-test:callback-fails"  # while this key exists, FailingCallback raises


# set by the test that has two in-process workers finish at the same instant
barrier: threading.Barrier | None = None


def redis() -> Any:
    return kiq.default_config().redis


class Noop(kiq.Job):
    kiq_name = "BatchNoop"

    def perform(self, *args: Any) -> None:
        pass


class Counted(kiq.Job):
    """Counts its runs by jid; takes ``ms`` milliseconds (so a kill finds some in flight)."""

    kiq_name = "BatchCounted"

    def perform(self, ms: int = 0) -> None:
        time.sleep(ms / 1000)
        redis().hincrby(RUNS, self.jid, 1)


class Flaky(kiq.Job):
    """Raises while FAIL exists."""

    kiq_name = "BatchFlaky"
    kiq_options = {"retry": 5}

    def perform(self) -> None:
        if redis().exists(FAIL):
            raise RuntimeError("failing while the flag is set")


class Dies(Flaky):
    """Dies at once (no retries) while FAIL exists."""

    kiq_name = "BatchDies"
    kiq_options = {"retry": 0}


class AtTheBarrier(kiq.Job):
    """Returns when as many jobs as the barrier's parties reached it: they all finish at the same instant."""

    kiq_name = "BatchAtTheBarrier"

    def perform(self) -> None:
        assert barrier is not None
        barrier.wait(10)


class Marked(kiq.Job):
    """Notes that it ran, in ORDER, after ``ms`` milliseconds."""

    kiq_name = "BatchMarked"

    def perform(self, name: str, ms: int = 0) -> None:
        time.sleep(ms / 1000)
        redis().rpush(ORDER, f"job:{name}")


class Callback(kiq.Job):
    """A batch callback: counts the event it was pushed for, and keeps its arguments."""

    kiq_name = "BatchCallback"

    def perform(self, *args: Any) -> None:
        fired = self.job["batch_callback"]
        name = f"{fired['bid']}:{fired['event']}"
        pipe = redis().pipeline(transaction=True)
        pipe.hincrby(FIRED, name, 1)
        pipe.rpush(ORDER, name)
        pipe.rpush(ARGS, kiq.ext.dumps({"args": list(args)}))
        pipe.execute()


class FailingCallback(Callback):
    """A callback that raises (and is retried) while FAILING_CALLBACK exists, counting each attempt."""

    kiq_name = "BatchFailingCallback"
    kiq_options = {"retry": 3}

    def perform(self, *args: Any) -> None:
        redis().hincrby(FIRED, f"attempt:{self.job['batch_callback']['event']}", 1)
        if redis().exists(FAILING_CALLBACK):
            raise RuntimeError("the callback fails")
        super().perform(*args)


class AddsJobs(kiq.Job):
    """Adds ``count`` jobs to its own batch while it runs, the last of them ``ms`` milliseconds after the first."""

    kiq_name = "BatchAddsJobs"

    def perform(self, count: int, ms: int = 0) -> None:
        batch = Batch.of(self)
        assert batch is not None
        with batch:
            for index in range(count):
                Marked.perform_async(f"added-{index}")
                time.sleep(ms / 1000 / max(count, 1))


class MakesChild(kiq.Job):
    """Makes a child batch of its own batch, of ``count`` Marked jobs taking ``ms`` each."""

    kiq_name = "BatchMakesChild"

    def perform(self, count: int, ms: int) -> None:
        parent = Batch.of(self)
        assert parent is not None
        with parent, Batch("child", on_complete=Callback, on_success=Callback) as child:
            redis().rpush(ORDER, f"child:{child.bid}")
            for index in range(count):
                Marked.perform_async(f"child-{index}", ms)
