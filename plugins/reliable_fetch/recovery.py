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

On a cluster with ``slots = "queue"`` each list lives beside its queue (keys.py), where its jobs go back; the
liveness keys are in kiq's shared slot, so the claim checks them in the round trip before it (``_owner_gone``),
and a job past the cap reaches the dead set (shared slot) and leaves its list (the queue's) in two commands.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import kiq
import kiq.ext
from kiq.api import DeadSet

from . import scripts
from .keys import (
    RECOVERING_PREFIX,
    WORKING_PREFIX,
    JobList,
    alive_key,
    list_pattern,
    liveness_ttl_ms,
    owner_of,
    parse_list,
    recovering_key,
)

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
    keys = kiq.ext.keyspace(redis)
    lease_ms = int(config.get("reliable_recovery_interval") * 1000)
    ttl_ms = liveness_ttl_ms(config)
    # only a live process recovers (the claim list of a dead one would be an orphan itself), one at a time
    lease = redis.register_script(scripts.LEASE.source)
    if lease(keys=scripts.LEASE.keys(keys, identity), args=[identity, lease_ms, ttl_ms]) != 1:
        return None
    claim = redis.register_script(scripts.CLAIM.source)
    me = alive_key(identity)
    report = Recovery()
    for prefix in (WORKING_PREFIX, RECOVERING_PREFIX):
        # SCAN on a cluster: redis-py's RedisCluster.scan_iter walks every primary, one cursor each
        for key in redis.scan_iter(match=list_pattern(keys, prefix), count=SCAN_COUNT, _type="list"):
            found = parse_list(keys, key)
            owner = owner_of(found.name) if found is not None else None
            if found is None or owner is None:
                continue
            mine = JobList(recovering_key(identity), found.queue)
            if alive_key(owner) == me:
                if found == mine:  # left over from an earlier pass of ours that failed
                    _return_claimed(config, mine, report)
                continue
            if keys.slots == "queue" and not _owner_gone(config, owner, identity, ttl_ms):
                continue
            claim_keys = scripts.CLAIM.keys(keys, found.name, mine.name, found.queue or "", owner, identity)
            # this process's liveness TTL, not the lease's (a shorter lease cut it short: a live recoverer could
            # then be taken for dead)
            if claim(keys=claim_keys, args=[ttl_ms]) > 0:
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


def _owner_gone(config: Config, owner: str, identity: str, ttl_ms: int) -> bool:
    """In the queue layout the claim script cannot see the liveness keys (kiq's shared slot): check the owner's and
    refresh this process's just before it, in one round trip. An owner that comes back to life in between (it
    stalled for its whole liveness TTL, and resumes within this round trip) has the jobs it holds run twice, as
    any process whose heartbeat stalls that long: never lost."""
    keys = kiq.ext.keyspace(config.redis)
    commands = [("EXISTS", keys.key(alive_key(owner))), ("PEXPIRE", keys.key(alive_key(identity)), ttl_ms)]
    return bool(kiq.ext.run_pipeline(config.redis, commands)[0] == 0)


def _return_claimed(config: Config, job_list: JobList, report: Recovery) -> None:
    requeued, dead = put_back(config, job_list, count_interruption=True)
    report.requeued += requeued
    report.dead += dead


def put_back(
    config: Config, job_list: JobList, count_interruption: bool, jobs: list[str] | None = None
) -> tuple[int, int]:
    """Move the jobs of ``job_list`` (or only ``jobs`` of it, newest first) back to their queues (the list's queue in
    the queue layout, else the queue named in each payload): a dead process's (``count_interruption``) to the back,
    counting the interruption; this process's own (at its stop, or those a lost reply left there) to the fetch end,
    the oldest (rightmost) last so it runs first. Each moves only if it is still listed. Returns (requeued, dead).

    A job past its interrupt cap (or unparseable) goes to the dead set first and leaves the list after: in the queue
    layout those are two slots, so no script can do both; a crash in between leaves it listed, and the next recovery
    kills it again (two dead entries at worst, never a loss)."""
    redis = config.redis
    keys = kiq.ext.keyspace(redis)
    key = job_list.key(keys)
    if jobs is None:
        jobs = cast(list[str], redis.lrange(key, 0, -1))  # newest first
    if count_interruption:
        jobs.reverse()  # to the back, oldest first: they keep their order
    commands = []
    dead = 0
    for job in jobs:
        try:
            payload = kiq.ext.parse_payload(job)
        except kiq.InvalidPayload as exc:
            log.error("reliable fetch: an unrunnable job goes to the dead set (%s): %.200s", exc, job)
            DeadSet(config).kill(job, notify_failure=False)
        else:
            queue = job_list.queue or payload.get("queue", "default")
            if not count_interruption:
                commands.append(scripts.requeue_command(keys, job_list.name, queue, job, "front"))
                continue
            error = _interrupt(config, payload)
            if error is None:
                commands.append(
                    scripts.requeue_command(keys, job_list.name, queue, job, "back", kiq.ext.dumps(payload))
                )
                continue
            DeadSet(config).kill(kiq.ext.dumps(payload), notify_failure=True, exc=error)
        redis.lrem(key, -1, job)  # after it is safely dead: a crash in between can only kill it twice
        dead += 1
    moved = sum(kiq.ext.run_pipeline(redis, commands)) if commands else 0
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
    payload["error_class"] = kiq.ext.error_class(error)
    payload["error_message"] = str(error)
    payload.setdefault("failed_at", kiq.ext.wire_time(time.time(), config.sidekiq_wire))
    return error
