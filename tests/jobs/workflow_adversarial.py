"""Jobs for the adversarial workflow tests (tests/plugins/workflow/test_adversarial_*.py): results that are not
JSON, steps that stop in the middle, and a step the worker has no class for. Runs are recorded in Redis."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import kiq
import kiq.ext
from tests.jobs import deep

RUNS = "wf-adv:runs"  # HASH: "<class>:<workflow id>:<step>" -> runs
BODIES = "wf-adv:bodies"  # LIST: JSON {"wf", "results"} of each chord body run
HANDLED = "wf-adv:handled"  # LIST: JSON of the arguments each on_error handler run got
ENDED = "wf-adv:ended"  # SET: "<workflow id>:<step>" of the steps whose perform returned (before the step script)
TICKS = "wf-adv:ticks"  # HASH: "<workflow id>:<tick>" -> how many of its members ended in that tick of the clock
KILL_AFTER = "wf-adv:kill-after"  # SET of "<workflow id>:<step>": SIGKILL the worker once that step returned


def redis() -> Any:
    return kiq.default_config().redis


def name(job: kiq.Job) -> str:
    return f"{job.job.get('wf')}:{job.job.get('wf_step')}"


def counted(job: kiq.Job) -> None:
    redis().hincrby(RUNS, f"{type(job).kiq_name}:{name(job)}", 1)


class Odd:
    def __repr__(self) -> str:
        return "<Odd>"


ODD_VALUES: dict[str, Any] = {
    "set": {1, 2},
    "object": Odd(),
    "nan": float("nan"),
    "inf": float("inf"),
    "bytes": b"\x00\xff",
    "surrogate": "a\ud800b",
    "deep": deep(5000),  # json.dumps and repr raise RecursionError
    "nul": "a\x00b",  # strict JSON ("\u0000"): a valid result
}


class Returns(kiq.Job):
    """Returns the odd value named by its argument."""

    kiq_name = "WfAdvReturns"

    def perform(self, kind: str) -> Any:
        counted(self)
        return ODD_VALUES[kind]


class Value(kiq.Job):
    kiq_name = "WfAdvValue"

    def perform(self, value: Any, ms: int = 0) -> Any:
        time.sleep(ms / 1000)
        counted(self)
        return value


class Step(kiq.Job):
    """A step that takes ``ms`` and returns ``value``; its worker SIGKILLs itself right after ``perform`` returns
    when the test listed the step in KILL_AFTER (between the step's end and its successor's push)."""

    kiq_name = "WfAdvStep"
    kiq_options = {"retry": 0}  # a step that fails dies at once: an outage must not look like its failure

    def perform(self, value: Any, ms: int = 0) -> Any:
        time.sleep(ms / 1000)
        counted(self)
        return value


class Collect(kiq.Job):
    kiq_name = "WfAdvCollect"
    kiq_options = {"retry": 0}

    def perform(self, results: list[Any]) -> list[Any]:
        counted(self)
        redis().rpush(BODIES, kiq.ext.dumps({"wf": self.job.get("wf"), "results": results}))
        return results


class AsyncStep(kiq.Job):
    kiq_name = "WfAdvAsyncStep"
    kiq_options = {"retry": 0}

    async def perform(self, value: Any, ms: int = 0) -> Any:
        await asyncio.sleep(ms / 1000)
        counted(self)
        return value


class Handler(kiq.Job):
    kiq_name = "WfAdvHandler"

    def perform(self, workflow_id: str, jid: str, error: dict[str, Any]) -> None:
        redis().rpush(HANDLED, kiq.ext.dumps({"args": [workflow_id, jid, error]}))


class KillAfterStep(kiq.ServerMiddleware):
    """Innermost: SIGKILL this worker once a listed step's ``perform`` returned, before the workflow middleware
    records it and pushes its successor."""

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> kiq.Wrapper:
        yield
        step = f"{job.get('wf')}:{job.get('wf_step')}"
        if self.config.redis.srem(KILL_AFTER, step):
            self.config.redis.sadd(ENDED, step)
            os.kill(os.getpid(), signal.SIGKILL)


@kiq.configure_server
def _kill_after(config: kiq.Config) -> None:
    if os.environ.get("WF_ADV_KILL_AFTER") == "1":
        config.server_middleware.add(KillAfterStep)


def noted(job: kiq.Job) -> None:
    """``<workflow id>:<step>@<enqueued_at>`` appended to the file WF_ADV_RUNS_FILE names: runs recorded without Redis
    (which may be down). A step run twice with one ``enqueued_at`` was delivered twice; with two, pushed twice."""
    with open(os.environ["WF_ADV_RUNS_FILE"], "a") as runs:
        runs.write(f"{name(job)}@{job.job.get('enqueued_at')!r}\n")


class FileStep(kiq.Job):
    """Adds one to its value after ``ms``; notes its run in a file, not in Redis (the outage tests stop Redis while
    steps run). ``retry: 0``: a step whose outcome an outage caught would die, and fail its workflow, if the
    workflow took the outage for the step's failure."""

    kiq_name = "WfAdvFileStep"
    kiq_options = {"retry": 0}

    def perform(self, value: int, ms: int = 0) -> int:
        time.sleep(ms / 1000)
        noted(self)
        return value + 1


class AsyncFileStep(kiq.Job):
    kiq_name = "WfAdvAsyncFileStep"
    kiq_options = {"retry": 0}

    async def perform(self, value: int, ms: int = 0) -> int:
        await asyncio.sleep(ms / 1000)
        noted(self)
        return value + 1


class FileCollect(kiq.Job):
    kiq_name = "WfAdvFileCollect"
    kiq_options = {"retry": 0}

    def perform(self, results: list[int]) -> int:
        noted(self)
        return sum(results)


def next_tick(ms: int) -> float:
    """Seconds until the next multiple of ``ms`` ms of the clock: steps that wait for it end at the same instant."""
    return ms / 1000 - time.time() % (ms / 1000)


def met(job: kiq.Job, tick_ms: int) -> None:
    """Count the run, and the tick it ended in (members that end in the same tick finished at once)."""
    counted(job)
    redis().hincrby(TICKS, f"{job.job.get('wf')}:{round(time.time() * 1000 / tick_ms)}", 1)


class Meet(kiq.Job):
    """Returns its value at the next tick of the clock, so the members of a chord fetched together end together."""

    kiq_name = "WfAdvMeet"
    kiq_options = {"retry": 0}

    def perform(self, value: Any, tick_ms: int = 20) -> Any:
        time.sleep(next_tick(tick_ms))
        met(self, tick_ms)
        return value


class AsyncMeet(kiq.Job):
    kiq_name = "WfAdvAsyncMeet"
    kiq_options = {"retry": 0}

    async def perform(self, value: Any, tick_ms: int = 20) -> Any:
        await asyncio.sleep(next_tick(tick_ms))
        met(self, tick_ms)
        return value
