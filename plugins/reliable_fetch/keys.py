"""The Redis keys of the reliable fetcher, in one place (they are part of what the docs promise to operators).

- ``kiq:working:<identity>:<capsule>`` LIST: the jobs a process took from its queues and has not acknowledged.
- ``kiq:recovering:<identity>`` LIST: orphaned jobs a live process has claimed and is putting back.
- ``kiq:alive:<identity>`` STRING with a TTL: present while the process lives; refreshed by the heartbeat.
- ``kiq:reliable:recovery-lease`` STRING with a TTL: one process recovers orphans per interval.

The owner's identity is part of each list's name, so recovery finds lists with ``SCAN`` and checks their
owner's liveness key without any index that could drift out of date.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiq import Config

WORKING_PREFIX = "kiq:working:"
RECOVERING_PREFIX = "kiq:recovering:"
ALIVE_PREFIX = "kiq:alive:"
LEASE_KEY = "kiq:reliable:recovery-lease"


def working_key(identity: str, capsule: str) -> str:
    # the capsule is the last ``:`` part, so a ``:`` in its name would make the owner unreadable
    return f"{WORKING_PREFIX}{identity}:{capsule.replace(':', '_')}"


def recovering_key(identity: str) -> str:
    return f"{RECOVERING_PREFIX}{identity}"


def alive_key(identity: str) -> str:
    return f"{ALIVE_PREFIX}{identity}"


def owner_of(key: str) -> str | None:
    """The identity of the process that owns a working or recovering list, or None for a foreign key."""
    if key.startswith(WORKING_PREFIX):
        owner = key[len(WORKING_PREFIX) :].rpartition(":")[0]
        return owner or None
    if key.startswith(RECOVERING_PREFIX):
        return key[len(RECOVERING_PREFIX) :] or None
    return None


def liveness_ttl_ms(config: Config) -> int:
    """Three heartbeats (at least a second): a process missing that many is taken for dead."""
    return int(max(3 * config.heartbeat_interval, 1.0) * 1000)
