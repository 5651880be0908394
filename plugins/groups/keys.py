"""The Redis keys of job groups, in one place (they are part of what the docs promise to operators).

Every key of a queue's groups starts with that queue's *base*, ``kiq.ext.Keyspace.queue_scoped("kiq:groups:", q)``
(``kiq:groups:7:default:`` on a standalone server, ``kiq:groups:7:{default}:`` beside the queue in a cluster's
``queue`` layout), which the scripts extend by appending:

- ``<base>j:<group>`` LIST: the group's waiting jobs (pushed with ``LPUSH``, taken oldest first with ``RPOP``), and
  ``<base>i:<group>`` LIST: their jids, in the same order (a slot is leased by jid, without decoding the job);
- ``<base>r`` LIST: the rotation, the groups with ready work that may run (not paused, under their limit), and
  ``""`` standing for the queue's ungrouped jobs (``queue:<q>``); ``<base>m`` SET: its members;
- ``<base>p`` SET: paused groups; ``<base>f`` SET: groups with waiting jobs left out of the rotation at their limit;
- ``<base>x`` HASH: group -> its concurrency (absent: the ``group_concurrency`` setting; 0: unlimited);
- ``<base>c`` HASH: group -> slots held; ``<base>l`` ZSET: the slots, ``<group>\\0<jid>`` scored by when they expire
  (epoch ms, Redis's clock);
- ``<base>w`` LIST: one token when new group work arrived, for a fetcher blocked on it.
"""

from __future__ import annotations

import kiq
import kiq.ext

PREFIX = "kiq:groups:"
MAX_LENGTH = 256  # characters of a group id


def base(keys: kiq.ext.Keyspace, queue: str) -> str:
    """The start of every key of ``queue``'s groups."""
    return keys.queue_scoped(PREFIX, queue)


def jobs_key(keys: kiq.ext.Keyspace, queue: str, group: str) -> str:
    return base(keys, queue) + "j:" + group


def wake_key(keys: kiq.ext.Keyspace, queue: str) -> str:
    return base(keys, queue) + "w"


def slot(group: str, jid: str) -> str:
    """A group's slot held by the job ``jid`` (a member of ``<base>l``)."""
    return f"{group}\0{jid}"


def check_group(group: object, where: str) -> str:
    """``group`` if it is a group id (a non-empty string of at most 256 characters, no NUL); else InvalidJobError
    naming it and ``where`` it came from."""
    if not isinstance(group, str) or not group or len(group) > MAX_LENGTH or "\0" in group:
        raise kiq.InvalidJobError(
            f"{where}: a job group must be a non-empty string of at most {MAX_LENGTH} characters without NUL, got "
            f"{group!r:.80} ({type(group).__name__}); nothing was pushed"
        )
    return group
