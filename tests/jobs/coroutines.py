"""Async jobs for the asyncio tests (in-process and in ``kiq worker -r tests.jobs.coroutines``): each leaves its
trace in the worker's Redis through the asyncio client, as an application's coroutine would."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kiq
from kiq.async_client import async_redis
from tests.jobs.basic import Record


def _redis() -> Any:
    return async_redis(kiq.default_config())


class Nap(kiq.Job):
    """Counts its start (``nap_started`` list, ``nap_starts`` hash), awaits ``seconds``, then adds ``marker`` to the
    set ``napped`` and counts the finished run in ``nap_runs``."""

    kiq_name = "Nap"

    async def perform(self, seconds: float, marker: str) -> None:
        pipe = _redis().pipeline(transaction=False)
        pipe.rpush("nap_started", marker)
        pipe.hincrby("nap_starts", marker, 1)
        await pipe.execute()
        await asyncio.sleep(seconds)
        pipe = _redis().pipeline(transaction=False)
        pipe.sadd("napped", marker)
        pipe.hincrby("nap_runs", marker, 1)
        await pipe.execute()


class AsyncBoom(kiq.Job):
    """Fails after an await: the retry rules apply (one retry, then dead)."""

    kiq_name = "AsyncBoom"
    kiq_options = {"retry": 1}

    async def perform(self, marker: str) -> None:
        await asyncio.sleep(0.01)
        await _redis().hincrby("boom_runs", marker, 1)
        raise ValueError(f"async boom {marker}")

    def retry_in(self, count: int, exc: BaseException, job: dict[str, Any]) -> int:
        return 0


class Context(kiq.Job):
    """Records, from inside the coroutine, the log context and whether its jid is the one the job runs."""

    kiq_name = "Context"

    async def perform(self, marker: str) -> None:
        await asyncio.sleep(0.01)
        logging.getLogger("tests.jobs").info("inside %s", marker)
        await _redis().hset("contexts", marker, self.jid)


@kiq.job(name="nap_function")
async def nap_function(marker: str) -> None:
    await asyncio.sleep(0.01)
    await _redis().sadd("napped", marker)


__all__ = ["AsyncBoom", "Context", "Nap", "Record", "nap_function"]
