"""Batch statuses for asyncio code, read on the event loop's Redis connection: ``await aio.status(bid)``.
(Blocks need nothing of their own: ``async with batch:``.)"""

from __future__ import annotations

import kiq
import kiq.ext

from .keys import checked_bid, index_key
from .status import BatchStatus, collect, parse, queue_reads


async def status(bid: str, config: kiq.Config | None = None) -> BatchStatus | None:
    """``kiq.plugins.batch.status`` without blocking the event loop."""
    redis = kiq.AsyncClient(config).redis
    pipe = redis.pipeline(transaction=True)
    queue_reads(pipe, kiq.ext.keyspace(redis), checked_bid(bid))
    return parse(bid, await pipe.execute())


async def batches(config: kiq.Config | None = None, limit: int = 50) -> list[BatchStatus]:
    """``kiq.plugins.batch.batches`` without blocking the event loop."""
    redis = kiq.AsyncClient(config).redis
    keys = kiq.ext.keyspace(redis)
    bids = [str(bid) for bid in await redis.zrevrange(index_key(keys), 0, limit - 1)]
    pipe = redis.pipeline(transaction=False)
    for bid in bids:
        queue_reads(pipe, keys, bid)
    found, gone = collect(bids, await pipe.execute())
    if gone:
        await redis.zrem(index_key(keys), *gone)
    return found
