"""Batch statuses for asyncio code, read on the event loop's Redis connection: ``await aio.status(bid)``.
(Blocks need nothing of their own: ``async with batch:``.)"""

from __future__ import annotations

import kiq

from .keys import INDEX, checked_bid
from .status import BatchStatus, collect, parse, queue_reads


async def status(bid: str, config: kiq.Config | None = None) -> BatchStatus | None:
    """``kiq.plugins.batch.status`` without blocking the event loop."""
    pipe = kiq.AsyncClient(config).redis.pipeline(transaction=True)
    queue_reads(pipe, checked_bid(bid))
    return parse(bid, await pipe.execute())


async def batches(config: kiq.Config | None = None, limit: int = 50) -> list[BatchStatus]:
    """``kiq.plugins.batch.batches`` without blocking the event loop."""
    redis = kiq.AsyncClient(config).redis
    bids = [str(bid) for bid in await redis.zrevrange(INDEX, 0, limit - 1)]
    pipe = redis.pipeline(transaction=False)
    for bid in bids:
        queue_reads(pipe, bid)
    found, gone = collect(bids, await pipe.execute())
    if gone:
        await redis.zrem(INDEX, *gone)
    return found
