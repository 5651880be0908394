"""The batch plugin's fleet metrics (``kiq_metrics``, scope ``"fleet"``): ``kiq_batches`` (batches Redis holds, the
index ``kiq:batches``) and ``kiq_batches_open`` (those not complete yet: some job has not run once).

One pipelined round trip: ``ZCARD`` of the index and ``HEXISTS complete_at`` of the newest ``MAX_EXAMINED``
batches (an expired batch answers 0 and is not counted: the index forgets it at the next listing). With more
batches than that in Redis, ``kiq_batches_open`` counts among the newest only.
"""

from __future__ import annotations

import kiq
import kiq.ext

from .keys import batch_key, index_key

MAX_EXAMINED = 10_000


def fleet_readings(config: kiq.Config) -> list[kiq.ext.Reading]:
    redis = config.redis
    keys = kiq.ext.keyspace(redis)
    bids: list[str] = redis.zrevrange(index_key(keys), 0, MAX_EXAMINED - 1)  # type: ignore[assignment]
    pipe = redis.pipeline(transaction=False)
    pipe.zcard(index_key(keys))
    for bid in bids:
        pipe.exists(batch_key(keys, bid))
        pipe.hexists(batch_key(keys, bid), "complete_at")
    total, *replies = pipe.execute()
    existing = replies[0::2]
    complete = replies[1::2]
    open_ = sum(1 for exists, done in zip(existing, complete, strict=True) if exists and not done)
    return [
        kiq.ext.Reading("kiq_batches", total, help="batches in Redis (the index kiq batches lists)"),
        kiq.ext.Reading(
            "kiq_batches_open", open_, help=f"batches not complete yet (among the newest {MAX_EXAMINED:,})"
        ),
    ]
