"""What Redis holds of each queue's groups, read for ``kiq groups``, the dashboard's Groups tab and the metrics: a
group is listed while it has waiting jobs, slots in use, a concurrency of its own or a pause."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import kiq
import kiq.ext

from .keys import base


@dataclass(frozen=True, slots=True)
class GroupState:
    queue: str
    name: str
    ready: int  # jobs waiting
    running: int  # slots in use
    limit: int | None  # its own concurrency; None: the workers' group_concurrency
    paused: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class QueueGroups:
    """One queue's groups: how many, their waiting jobs in all, and the ``shown`` ones (most waiting first)."""

    queue: str
    count: int
    active: int  # with jobs waiting or running
    waiting: int
    running: int
    shown: list[GroupState]


def group_names(config: kiq.Config, queue: str) -> list[str]:
    """Every group of ``queue`` Redis holds something of (two round trips at most)."""
    redis = config.redis
    prefix = base(kiq.ext.keyspace(redis), queue)
    pipe = redis.pipeline(transaction=False)
    pipe.sunion([prefix + "m", prefix + "p", prefix + "f"])
    pipe.hkeys(prefix + "x")
    pipe.hkeys(prefix + "c")
    members, limited, running = pipe.execute()
    return sorted({str(name) for name in (*members, *limited, *running)})


def queue_groups(config: kiq.Config, queue: str, limit: int = 50) -> QueueGroups:
    """``queue``'s groups, the ``limit`` with most waiting jobs shown (one pipelined read of every group)."""
    redis = config.redis
    prefix = base(kiq.ext.keyspace(redis), queue)
    names = group_names(config, queue)
    pipe = redis.pipeline(transaction=False)
    for name in names:
        pipe.llen(prefix + "j:" + name)
        pipe.hget(prefix + "c", name)
        pipe.hget(prefix + "x", name)
        pipe.sismember(prefix + "p", name)
    replies = pipe.execute() if names else []
    states = [
        GroupState(queue, name, int(ready), int(running or 0), None if own is None else int(own), bool(paused))
        for name, (ready, running, own, paused) in zip(names, _fours(replies), strict=True)
    ]
    states.sort(key=lambda state: (-state.ready, -state.running, state.name))
    waiting = sum(state.ready for state in states)
    running = sum(state.running for state in states)
    active = sum(1 for state in states if state.ready or state.running)
    return QueueGroups(queue, len(states), active, waiting, running, states[: max(0, limit)])


def all_groups(config: kiq.Config, limit: int = 50) -> list[QueueGroups]:
    """Every queue that has groups (``kiq.Queue.all()``), each with its ``limit`` busiest groups."""
    found = [queue_groups(config, queue.name, limit) for queue in kiq.Queue.all(config)]
    return [groups for groups in found if groups.count]


def _fours(replies: list[Any]) -> list[tuple[Any, Any, Any, Any]]:
    return [(replies[at], replies[at + 1], replies[at + 2], replies[at + 3]) for at in range(0, len(replies), 4)]
