"""The Redis keys of the reliable fetcher, in one place (they are part of what the docs promise to operators).

Names (what a standalone server uses as they are; ``kiq.ext.keyspace`` turns them into a cluster's keys):

- ``kiq:working:<identity>:<capsule>`` LIST: the jobs a process took from its queues and has not acknowledged
  (on a standalone Redis, a capsule of several queues has one per queue: ``kiq:working:<identity>:<capsule>~<queue>``).
- ``kiq:recovering:<identity>`` LIST: orphaned jobs a live process has claimed and is putting back.
- ``kiq:alive:<identity>`` STRING with a TTL: present while the process lives; refreshed by the heartbeat.
- ``kiq:reliable:recovery-lease`` STRING with a TTL: one process recovers orphans per interval.

On a cluster with ``slots = "one"`` each is ``{kiq}`` + its name. With ``slots = "queue"`` a fetch moves jobs from a
queue's list into a working list in one script, so the lists live beside their queue: one working list (and one
recovering list) per queue, ``<name>{<queue>}``, whose jobs go back to that queue; the liveness key and the lease
stay in kiq's shared slot. The owner's identity is part of each list's name, so recovery finds lists with ``SCAN``
and checks their owner's liveness key without any index that could drift out of date.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiq import Config
    from kiq.ext import Keyspace

WORKING_PREFIX = "kiq:working:"
RECOVERING_PREFIX = "kiq:recovering:"
ALIVE_PREFIX = "kiq:alive:"
LEASE_KEY = "kiq:reliable:recovery-lease"


def _plain(part: str) -> str:
    # a brace would move a list's hash tag (and hide its queue in the queue layout): never in a hostname anyway
    return part.replace("{", "_").replace("}", "_")


def working_key(identity: str, capsule: str) -> str:
    """The name of a capsule's working list (its key: ``JobList.key``)."""
    # the capsule is the last ``:`` part, so a ``:`` in its name would make the owner unreadable
    return f"{WORKING_PREFIX}{_plain(identity)}:{_plain(capsule).replace(':', '_')}"


def queue_list_name(working: str, queue: str) -> str:
    """The working list of one queue of a capsule (``<working>~<queue>``), where a standalone Redis keeps each queue's
    jobs apart when a capsule serves several (each has its own blocking move: waiting.py). The queue is made
    plain, as the capsule is, so the owner stays readable."""
    return f"{working}~{_plain(queue).replace(':', '_')}"


def recovering_key(identity: str) -> str:
    return f"{RECOVERING_PREFIX}{_plain(identity)}"


def alive_key(identity: str) -> str:
    return f"{ALIVE_PREFIX}{_plain(identity)}"


@dataclass(frozen=True, slots=True)
class JobList:
    """A working or recovering list: its ``name`` and, in the queue layout, the ``queue`` it lives beside, where its
    jobs go back; None where one list serves every queue (standalone, ``slots = "one"``): each job goes back to the
    queue its payload names."""

    name: str
    queue: str | None

    @classmethod
    def beside(cls, keys: Keyspace, name: str, queue: str) -> JobList:
        """The list ``name`` for jobs of ``queue`` on a Redis of keyspace ``keys``."""
        return cls(name, queue if keys.slots == "queue" else None)

    def key(self, keys: Keyspace) -> str:
        return keys.key(self.name) if self.queue is None else keys.beside_queue(self.queue, self.name)


def list_pattern(keys: Keyspace, prefix: str) -> str:
    """The ``SCAN`` pattern of every list named ``prefix...`` (the hash tag ends the key in the queue layout)."""
    return (prefix if keys.slots == "queue" else keys.key(prefix)) + "*"


def parse_list(keys: Keyspace, key: str) -> JobList | None:
    """The list a key ``SCAN`` found is (the inverse of ``JobList.key``), or None for a key of no list of ours."""
    shared = keys.key("")
    if keys.slots == "queue":
        name, brace, tag = key.partition("{")
        if not brace or not tag.endswith("}") or len(tag) < 2:
            return None
        return JobList(name, tag[:-1])
    return JobList(key[len(shared) :], None) if key.startswith(shared) else None


def owner_of(name: str) -> str | None:
    """The identity of the process that owns a working or recovering list named ``name``, or None for a foreign
    name."""
    if name.startswith(WORKING_PREFIX):
        owner = name[len(WORKING_PREFIX) :].rpartition(":")[0]
        return owner or None
    if name.startswith(RECOVERING_PREFIX):
        return name[len(RECOVERING_PREFIX) :] or None
    return None


def liveness_ttl_ms(config: Config) -> int:
    """Three heartbeats (at least a second): a process missing that many is taken for dead."""
    return int(max(3 * config.heartbeat_interval, 1.0) * 1000)
