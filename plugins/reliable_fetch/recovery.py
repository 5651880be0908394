"""Orphan recovery: the working lists of processes that died go back to the fetch end of their queues.

One process at a time does it (a lease, ``SET NX PX`` for ``reliable_recovery_interval``), finding lists with
``SCAN``. A list is claimed atomically (only if its owner's liveness key is gone) into this process's own
``kiq:recovering:<identity>`` list, so a recoverer that dies half-way leaves its claim to the next one. Each job
comes back with ``interrupted_count`` + 1, at the back of its queue (behind the jobs waiting, as Sidekiq Pro's
super_fetch does); at the cap (the job's ``max_interrupts`` or the ``reliable_max_interrupts`` setting) it goes to
the dead set instead, with the death hooks: a job that kills its worker must not crash-loop the fleet. At the
back, a healthy job caught in a crash loop (workers killed for another reason) waits behind the queue instead of
being taken by the next worker at once, so it is rarely in flight at the next crash too; the poison pill still
reaches the cap, one crash each time it runs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import kiq
from kiq.api import DeadSet

from . import scripts
from .keys import LEASE_KEY, RECOVERING_PREFIX, WORKING_PREFIX, alive_key, liveness_ttl_ms, owner_of, recovering_key

if TYPE_CHECKING:
    from kiq import Config

SCAN_COUNT = 500
log = logging.getLogger("kiq.reliable_fetch")


class InterruptedJobError(kiq.KiqError):
    """A job's worker process died while running it, as many times as allowed (likely a poison pill)."""


@dataclass
class Recovery:
    """What one recovery pass did."""

    lists: int = 0  # orphaned lists claimed
    requeued: int = 0
    dead: int = 0


def recover_orphans(config: Config, identity: str) -> Recovery | None:
    """One recovery pass on behalf of the live process ``identity`` (its liveness key must exist); None when
    that key is missing or another process holds the lease."""
    redis = config.redis
    lease_ms = int(config.get("reliable_recovery_interval") * 1000)
    # only a live process recovers (the claim list of a dead one would be an orphan itself), one at a time
    if redis.register_script(scripts.LEASE)(keys=[LEASE_KEY, alive_key(identity)],
                                            args=[identity, lease_ms, liveness_ttl_ms(config)]) != 1:  # fmt: skip
        return None
    claim = redis.register_script(scripts.CLAIM)
    mine = recovering_key(identity)
    report = Recovery()
    _return_claimed(config, mine, report)  # left over from an earlier pass of ours that failed
    for pattern in (WORKING_PREFIX + "*", RECOVERING_PREFIX + "*"):
        for key in redis.scan_iter(match=pattern, count=SCAN_COUNT, _type="list"):
            owner = owner_of(key)
            if owner is None or owner == identity:
                continue
            if claim(keys=[key, alive_key(owner), mine, alive_key(identity)], args=[lease_ms]) > 0:
                report.lists += 1
                _return_claimed(config, mine, report)
    if report.lists:
        log.warning(
            "reliable fetch recovered %d job(s) of %d dead process list(s); %d reached the interrupt cap and are dead",
            report.requeued + report.dead,
            report.lists,
            report.dead,
        )
    return report


def _return_claimed(config: Config, key: str, report: Recovery) -> None:
    requeued, dead = put_back(config, key, count_interruption=True)
    report.requeued += requeued
    report.dead += dead


def put_back(config: Config, list_key: str, count_interruption: bool, jobs: list[str] | None = None) -> tuple[int, int]:
    """Move the jobs of ``list_key`` (or only ``jobs`` of it, newest first) to the queues named in their payloads: a
    dead process's (``count_interruption``) to the back, counting the interruption; this process's own (at its stop,
    or those a lost reply left there) to the fetch end, the oldest (rightmost) last so it runs first. Each moves only
    if it is still listed. Returns (requeued, dead)."""
    redis = config.redis
    requeue = redis.register_script(scripts.REQUEUE)
    if jobs is None:
        jobs = cast(list[str], redis.lrange(list_key, 0, -1))  # newest first
    if count_interruption:
        jobs.reverse()  # to the back, oldest first: they keep their order
    pipe = redis.pipeline(transaction=False)
    dead = 0
    for job in jobs:
        try:
            payload = kiq.parse_payload(job)
        except kiq.InvalidPayload as exc:
            log.error("reliable fetch: an unrunnable job goes to the dead set (%s): %.200s", exc, job)
            DeadSet(config).kill(job, notify_failure=False)
        else:
            queue = kiq.queue_key(payload.get("queue", "default"))
            if not count_interruption:
                requeue(keys=[list_key, queue], args=[job, "front"], client=pipe)
                continue
            error = _interrupt(config, payload)
            if error is None:
                requeue(keys=[list_key, queue], args=[job, "back", kiq.dumps(payload)], client=pipe)
                continue
            DeadSet(config).kill(kiq.dumps(payload), notify_failure=True, exc=error)
        redis.lrem(list_key, -1, job)  # after it is safely dead: a crash in between can only kill it twice
        dead += 1
    moved = sum(pipe.execute())
    return moved, dead


def _count(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def _interrupt(config: Config, payload: dict[str, Any]) -> InterruptedJobError | None:
    """Count one more interruption; at the job's cap, set the error fields and return the error."""
    count = _count(payload.get("interrupted_count"), 0) + 1
    payload["interrupted_count"] = count
    cap = _count(payload.get("max_interrupts"), 0) or config.get("reliable_max_interrupts")
    if count < cap:
        return None
    error = InterruptedJobError(
        f"the worker process running this job died {count} times (killed, crashed or out of memory); "
        f"reliable fetch stops at max_interrupts={cap}, so this job may be what kills its workers"
    )
    payload["error_class"] = kiq.error_class(error)
    payload["error_message"] = str(error)
    payload.setdefault("failed_at", kiq.wire_time(time.time(), config.sidekiq_wire))
    return error
