"""Iterable jobs for the iteration tests (``-r tests.jobs.iteration``): each item processed is counted in Redis
(``HINCRBY iteration-test:seen <item> 1``), so a test reads which items ran and how many ran twice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import kiq

SEEN = "iteration-test:seen"  # HASH item -> times processed
HOOKS = "iteration-test:hooks"  # LIST of the hooks called, in order
FAILED = "iteration-test:failed"  # SET of the items that already raised once
QUEUE = "iteration"


def _redis() -> Any:
    return kiq.default_config().redis


class Walk(kiq.IterableJob):
    """Walks ``range(count)`` (the cursor of item i is i), sleeping ``pause`` s per item; item ``fail_at`` raises
    the first time it runs."""

    kiq_name = "IterationWalk"
    kiq_options = {"queue": QUEUE, "retry": 3}

    def build_enumerator(self, count: int, pause: float = 0.0, fail_at: int = -1, *, cursor: Any) -> Iterator[Any]:
        return ((item, item) for item in range(cursor or 0, count))

    def each_iteration(self, item: int, count: int, pause: float = 0.0, fail_at: int = -1) -> None:
        _redis().hincrby(SEEN, str(item), 1)
        if pause:
            time.sleep(pause)
        if item == fail_at and _redis().sadd(FAILED, item):
            raise RuntimeError(f"item {item} fails once")

    def on_start(self) -> None:
        _redis().rpush(HOOKS, "start")

    def on_resume(self) -> None:
        _redis().rpush(HOOKS, f"resume:{self.cursor}")

    def on_stop(self) -> None:
        _redis().rpush(HOOKS, "stop")

    def on_cancel(self) -> None:
        _redis().rpush(HOOKS, "cancel")

    def on_complete(self) -> None:
        _redis().rpush(HOOKS, "complete")


class AsyncWalk(kiq.IterableJob):
    """``Walk`` for the event loop: an async generator and an async each_iteration."""

    kiq_name = "IterationAsyncWalk"
    kiq_options = {"queue": QUEUE, "retry": 3}

    async def build_enumerator(self, count: int, pause: float = 0.0, *, cursor: Any) -> AsyncIterator[Any]:
        for item in range(cursor or 0, count):
            yield item, item

    async def each_iteration(self, item: int, count: int, pause: float = 0.0) -> None:
        _redis().hincrby(SEEN, str(item), 1)
        if pause:
            await asyncio.sleep(pause)

    async def on_complete(self) -> None:
        _redis().rpush(HOOKS, "complete")


class SlowItems(Walk):
    """``Walk`` whose items take ``pause`` seconds each, slept in short steps (a stop's Shutdown lands between)."""

    kiq_name = "IterationSlowItems"

    def each_iteration(self, item: int, count: int, pause: float = 0.0, fail_at: int = -1) -> None:
        _redis().hincrby(SEEN, str(item), 1)
        deadline = time.monotonic() + pause
        while time.monotonic() < deadline:
            time.sleep(0.02)


def seen(config: kiq.Config) -> dict[int, int]:
    """Item -> times processed."""
    return {int(item): int(times) for item, times in config.redis.hgetall(SEEN).items()}
