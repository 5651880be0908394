"""A batch's status, read from Redis in one round trip (a MULTI, so the counts are of one instant): ``status(bid)``,
``batches()`` for the newest ones, and the same reads for asyncio code (kiq.plugins.batch.aio)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import kiq
import kiq.ext

from .keys import batch_key, checked_bid, index_key

FIELDS = ("info", "parent", "created_at", "complete_at", "success_at", "death_at")
SETS = ("jids", "pending", "failed", "died", "open")


@dataclass(frozen=True)
class BatchStatus:
    """What a batch is at: Sidekiq Pro's ``total``, ``pending`` (jobs not succeeded yet) and ``failures`` (jobs that
    failed and have not succeeded since), plus ``dead`` (of those, jobs that died), the blocks still adding jobs,
    the children (bid -> running, complete or success) and the times of its events."""

    bid: str
    description: str
    created_at: float
    total: int
    pending: int
    failures: int
    dead: int
    open_blocks: int
    children: dict[str, str]
    callbacks: dict[str, str]  # event -> the callback's job class
    parent_bid: str | None
    complete_at: float | None
    success_at: float | None
    death_at: float | None

    @property
    def complete(self) -> bool:
        """Every job succeeded or failed (and every child is complete): the ``complete`` event fired."""
        return self.complete_at is not None

    @property
    def success(self) -> bool:
        """Every job and every child succeeded: the ``success`` event fired."""
        return self.success_at is not None

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "complete": self.complete, "success": self.success}


def queue_reads(pipe: Any, keys: kiq.ext.Keyspace, bid: str) -> None:
    """Queue on ``pipe`` (sync or asyncio, of a Redis whose keyspace is ``keys``) the reads of one batch; ``parse``
    makes its status of their replies."""
    pipe.hmget(batch_key(keys, bid), *FIELDS)
    for part in SETS:
        pipe.scard(batch_key(keys, bid, part))
    pipe.hgetall(batch_key(keys, bid, "kids"))


READS = 2 + len(SETS)  # replies per batch


def parse(bid: str, replies: list[Any]) -> BatchStatus | None:
    """The status of ``bid`` from its ``READS`` replies; None when the batch does not exist (or expired)."""
    (info_text, parent, created_at, complete_at, success_at, death_at), *counts, kids = replies
    if created_at is None:
        return None
    total, pending, failures, dead, open_blocks = (int(count) for count in counts)
    info = kiq.ext.loads(info_text) if info_text else {}
    return BatchStatus(
        bid=bid,
        description=str(info.get("description", "")),
        created_at=float(created_at),
        total=total,
        pending=pending,
        failures=failures,
        dead=dead,
        open_blocks=open_blocks,
        children={str(child): str(state) for child, state in kids.items()},
        callbacks={str(event): str(name) for event, name in info.get("callbacks", {}).items()},
        parent_bid=parent,
        complete_at=_time(complete_at),
        success_at=_time(success_at),
        death_at=_time(death_at),
    )


def _time(value: str | None) -> float | None:
    return None if value is None else float(value)


def status(bid: str, config: kiq.Config | None = None) -> BatchStatus | None:
    """The status of batch ``bid``, or None if there is no such batch (never created, or expired)."""
    redis = (config or kiq.default_config()).redis
    pipe = redis.pipeline(transaction=True)
    queue_reads(pipe, kiq.ext.keyspace(redis), checked_bid(bid))
    return parse(bid, pipe.execute())


def batches(config: kiq.Config | None = None, limit: int = 50) -> list[BatchStatus]:
    """The newest ``limit`` batches that still exist, newest first (the expired ones leave the index)."""
    redis = (config or kiq.default_config()).redis
    keys = kiq.ext.keyspace(redis)
    bids = [str(bid) for bid in redis.zrevrange(index_key(keys), 0, limit - 1)]
    pipe = redis.pipeline(transaction=False)
    for bid in bids:
        queue_reads(pipe, keys, bid)
    found, gone = collect(bids, pipe.execute())
    if gone:
        redis.zrem(index_key(keys), *gone)
    return found


def collect(bids: list[str], replies: list[Any]) -> tuple[list[BatchStatus], list[str]]:
    """The statuses of ``bids`` from their replies (``READS`` each), and the bids whose batch is gone."""
    found: list[BatchStatus] = []
    gone: list[str] = []
    for index, bid in enumerate(bids):
        batch = parse(bid, replies[index * READS : (index + 1) * READS])
        if batch is None:
            gone.append(bid)
        else:
            found.append(batch)
    return found, gone
