"""What periodic jobs keep in Redis: the claim of each tick, and the jobs the workers run (for ``kiq periodic``).

Exactly one enqueue per tick, whatever the number of processes and hosts: every worker runs the schedule, and at
each tick each one asks Redis to move the job's "last tick" forward to this tick. The move is atomic (Lua) and only
forward, so one caller wins; the others, and any caller late with an older tick (a paused process, a clock behind),
are refused. One field per job, whatever the frequency; no lease to hand over when a leader dies.

Both hashes are in kiq's shared slot on a Redis Cluster (``kiq.ext.keyspace``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import kiq
import kiq.ext

from .entries import PeriodicJob, from_table

if TYPE_CHECKING:
    import redis

LAST_TICKS = "kiq:periodic:last"  # HASH: job id -> the last tick enqueued (epoch seconds)
# HASH: job id -> {"job": the [[periodic]] table, "until": epoch}: the jobs live workers run, each refreshed on every
# heartbeat of a worker that runs it, so the listing shows every app's jobs on a shared Redis and drops a job no live
# worker runs any more
SCHEDULE = "kiq:periodic:schedule"

# KEYS: the last ticks. ARGV: the job's id, the tick. 1: the caller enqueues this tick; 0: it is taken (or older).
CLAIM = kiq.ext.lua_script(
    "periodic.claim",
    """
local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if last and last >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
""",
    lambda keys: [keys.key(LAST_TICKS)],
)


def publish(redis: redis.Redis, jobs: list[PeriodicJob], until: float) -> None:
    """Record that a live worker runs ``jobs``: listed until ``until`` unless it publishes them again."""
    redis.hset(
        kiq.ext.keyspace(redis).key(SCHEDULE),
        mapping={job.id: json.dumps({"job": job.as_table(), "until": until}) for job in jobs},
    )


def published(redis: redis.Redis) -> dict[str, dict[str, Any]]:
    """Every job published, by id: ``{"job": table, "until": epoch}``."""
    entries = redis.hgetall(kiq.ext.keyspace(redis).key(SCHEDULE))
    return {str(job_id): json.loads(text) for job_id, text in entries.items()}


def prune(redis: redis.Redis, now: float) -> None:
    """Forget the jobs no live worker has run for a while (a starting worker does it)."""
    gone = [job_id for job_id, entry in published(redis).items() if entry["until"] < now]
    if gone:
        redis.hdel(kiq.ext.keyspace(redis).key(SCHEDULE), *gone)


@dataclass(frozen=True)
class PeriodicStatus:
    job: PeriodicJob
    last_run: float | None  # the last tick enqueued (epoch seconds)
    next_run: float

    def as_dict(self) -> dict[str, Any]:
        return {**self.job.as_table(), "id": self.job.id, "last_run": self.last_run, "next_run": self.next_run}


def statuses(redis: redis.Redis, now: float | None = None) -> list[PeriodicStatus]:
    """The periodic jobs live workers run, with each one's last and next run, soonest first."""
    moment = time.time() if now is None else now
    last_ticks = redis.hgetall(kiq.ext.keyspace(redis).key(LAST_TICKS))
    found = []
    for job_id, entry in published(redis).items():
        if entry["until"] < moment:
            continue  # no live worker runs it any more
        job, last = from_table(entry["job"]), last_ticks.get(job_id)
        found.append(PeriodicStatus(job, None if last is None else float(last), job.next_tick(moment)))
    return sorted(found, key=lambda status: (status.next_run, status.job.name))
