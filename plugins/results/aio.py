"""Results for asyncio code: ``await aio.result(jid)``, read on the event loop's Redis connection."""

from __future__ import annotations

import asyncio
from typing import Any

import kiq

from .record import result_key
from .store import answer, pauses, refuse_unkept


async def result(jid: str, config: kiq.Config | None = None, wait: float = 0.0) -> Any:
    """``kiq.plugins.results.result`` without blocking the event loop (it awaits while it waits)."""
    redis = kiq.AsyncClient(refuse_unkept(jid, config or kiq.default_config())).redis
    for pause in pauses(wait):
        text = await redis.get(result_key(redis, jid))
        if text is not None or pause is None:
            return answer(jid, text)
        await asyncio.sleep(pause)
    raise AssertionError("pauses() ends with None")
