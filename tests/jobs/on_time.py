"""Jobs that record how late they started against the due time they were scheduled for (tests/server/
test_scheduled_on_time.py): ``{"jid", "due", "enqueued", "started"}`` appended to ``STARTS`` (``enqueued``: when the
poller pushed it, so a late start tells whether the poller or the fetch was late)."""

from __future__ import annotations

import json
import time
from typing import Any

import kiq

STARTS = "on-time:starts"


def record(job: kiq.Job, due: float | None) -> None:
    entry = {"jid": job.jid, "due": due, "enqueued": job.job.get("enqueued_at"), "started": time.time(),
             "retry_count": job.job.get("retry_count")}  # fmt: skip
    kiq.default_config().redis.rpush(STARTS, json.dumps(entry))


class Due(kiq.Job):
    """Records its start; ``due`` is the epoch time it was scheduled for."""

    def perform(self, due: float) -> None:
        record(self, due)


class FailsFirst(kiq.Job):
    """Fails its first attempt; its retry records its start (the test reads the retry entry's score)."""

    kiq_options = {"retry": 2}

    def retry_in(self, count: int, exc: BaseException, job: dict[str, Any]) -> int:
        return 1  # plus Sidekiq's jitter: rand(10) * (count + 1) seconds

    def perform(self) -> None:
        if "retry_count" not in self.job:
            raise RuntimeError("first attempt fails")
        record(self, None)


def starts(redis: Any) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in redis.lrange(STARTS, 0, -1)]
