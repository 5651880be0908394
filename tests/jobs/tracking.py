"""Jobs for the tracking tests (in-process and in ``kiq worker -r tests.jobs.tracking``)."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from typing import Any
from uuid import UUID

import kiq
from kiq.plugins.tracking import TaskFailure, message


class Enroll(kiq.Job):
    """``mode``: "ok" finishes, "fail" is a business failure, "flaky" raises on its first run only,
    "broken" raises every time (one retry, then it dies)."""

    kiq_options = {"retry": 1}

    def perform(self, number: int, mode: str = "ok") -> None:
        message(self, f"enrolling {number}")
        if mode == "fail":
            raise TaskFailure(f"product {number} is not sellable")
        if mode == "broken" or (mode == "flaky" and "retry_count" not in self.job):
            raise RuntimeError(f"{mode} {number}")

    def retry_in(self, count: int, exc: BaseException, job: dict[str, Any]) -> int:
        return 1


class TrackedAlone(kiq.Job):
    """Tracked without a task: the class opts in."""

    kiq_options = {"track": True}

    def perform(self, number: int) -> None:
        message(self, f"alone {number}")


class Untracked(kiq.Job):
    def perform(self, number: int) -> None:
        pass


DONE = "tracking-test:done"  # LIST of jids that ran, written to Redis (not the tracking database)


class SlowEnroll(kiq.Job):
    """Takes a little while, notes in Redis that it ran; ``fail`` is a business failure."""

    def perform(self, number: int, mode: str = "ok") -> None:
        time.sleep(0.05)
        message(self, f"slow {number}")
        kiq.default_config().redis.rpush(DONE, self.jid)
        if mode == "fail":
            raise TaskFailure(f"product {number} is not sellable")


class AsyncEnroll(kiq.Job):
    """``Enroll`` as a coroutine: "ok" finishes, "fail" is a business failure (TaskFailure)."""

    async def perform(self, number: int, mode: str = "ok") -> None:
        await asyncio.sleep(0.01)
        message(self, f"enrolling {number}")
        if mode == "fail":
            raise TaskFailure(f"product {number} is not sellable")


class TypedEnroll(kiq.Job):
    """Typed and keyword arguments in a task: its message shows what ``perform`` got."""

    def perform(self, product: UUID, *, price: Decimal) -> None:
        message(self, f"{type(product).__name__} {product} at {type(price).__name__} {price}")
