"""Jobs for tests/plugins/workflow (a worker loads them with ``-r tests.jobs.workflow`` and
``KIQ_PLUGINS=workflow``). They record their runs in Redis, where the tests read them back."""

from __future__ import annotations

import asyncio
import decimal
import time
from typing import Any

import kiq
import kiq.ext

RUNS = "wf-test:runs"  # HASH: "<class>:<workflow id>:<step>" -> runs (a step that ran twice shows 2)
BODIES = "wf-test:bodies"  # LIST: JSON of [workflow id, the results a body got]
HANDLED = "wf-test:handled"  # LIST: JSON of the arguments an on_error handler got
FAIL = "wf-test:fail"  # while this key exists, Flaky raises
REDELIVERED = "wf-test:redelivered"  # SET: the steps that ran again after their worker was killed


def redis() -> Any:
    return kiq.default_config().redis


def counted(job: kiq.Job) -> None:
    name = f"{type(job).kiq_name}:{job.job.get('wf')}:{job.job.get('wf_step')}"
    redis().hincrby(RUNS, name, 1)
    if job.job.get("interrupted_count"):
        redis().sadd(REDELIVERED, name)


class Add(kiq.Job):
    kiq_name = "WfAdd"

    def perform(self, left: int, right: int = 0, ms: int = 0) -> int:
        time.sleep(ms / 1000)
        counted(self)
        return left + right


class Mul(kiq.Job):
    kiq_name = "WfMul"

    def perform(self, left: int, right: int) -> int:
        counted(self)
        return left * right


class Const(kiq.Job):
    kiq_name = "WfConst"

    def perform(self, value: Any, ms: int = 0) -> Any:
        time.sleep(ms / 1000)
        counted(self)
        return value


class Collect(kiq.Job):
    """A chord body: records the results it got, and which push and which delivery of it this is (``enqueued_at``
    is stamped by the push; reliable fetch's redelivery keeps it and counts ``interrupted_count``)."""

    kiq_name = "WfCollect"

    def perform(self, results: list[Any]) -> list[Any]:
        counted(self)
        job = self.job
        record = {"wf": job.get("wf"), "results": results, "enqueued_at": job.get("enqueued_at"),
                  "interrupted": job.get("interrupted_count", 0)}  # fmt: skip
        redis().rpush(BODIES, kiq.ext.dumps(record))
        return results


class Total(kiq.Job):
    kiq_name = "WfTotal"

    def perform(self, results: list[int]) -> int:
        counted(self)
        return sum(results)


class Boom(kiq.Job):
    kiq_name = "WfBoom"
    kiq_options = {"retry": False}

    def perform(self, *args: Any) -> None:
        counted(self)
        raise ValueError("boom")


class Flaky(kiq.Job):
    """Raises while FAIL exists, then returns its argument."""

    kiq_name = "WfFlaky"
    kiq_options = {"retry": 5}

    def perform(self, value: Any) -> Any:
        counted(self)
        if redis().exists(FAIL):
            raise RuntimeError("failing while the flag is set")
        return value


class Handler(kiq.Job):
    kiq_name = "WfHandler"

    def perform(self, workflow_id: str, jid: str, error: dict[str, Any], note: str = "") -> None:
        redis().rpush(HANDLED, kiq.ext.dumps({"args": [workflow_id, jid, error, note]}))


class AsyncDouble(kiq.Job):
    kiq_name = "WfAsyncDouble"

    async def perform(self, value: int) -> int:
        await asyncio.sleep(0.001)
        counted(self)
        return value * 2


class Price(kiq.Job):
    """A typed parameter after the one a previous step gives."""

    kiq_name = "WfPrice"

    def perform(self, count: int, unit: decimal.Decimal) -> str:
        return str(count * unit)


class Scale(kiq.Job):
    """A typed parameter that the previous step gives (converted in the worker, not checked at the start)."""

    kiq_name = "WfScale"

    def perform(self, value: decimal.Decimal, factor: int) -> str:
        return str(value * factor)


class Subtotal(kiq.Job):
    """A typed result passed on: ``-> Decimal`` into ``Taxed(amount: Decimal)``."""

    kiq_name = "WfSubtotal"

    def perform(self, cents: int) -> decimal.Decimal:
        return decimal.Decimal(cents) / 100


class Taxed(kiq.Job):
    kiq_name = "WfTaxed"

    def perform(self, amount: decimal.Decimal, rate: str) -> decimal.Decimal:
        assert type(amount) is decimal.Decimal, f"got {amount!r}"  # read back as its type, not its JSON text
        return amount * decimal.Decimal(rate)
