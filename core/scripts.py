"""Every Lua script kiq runs, with the function that builds its ``KEYS``: one registry, so a test can check each
script against the rules that make it run on a Redis Cluster (tests/test_scripts.py):

- a script reads and writes only keys that a call declares in ``KEYS``, or keys it builds by appending to a declared
  key (``KEYS[1] .. ':pending'``: a key's hash tag is at its start, so the result stays in that key's slot) — never a
  key named by a literal (``'queue:' .. name`` would be a key of no particular slot);
- the keys one call declares fall in one hash slot in every layout (``keys`` is called with sample names);
- a script survives a resharding (kiq.resharding): while its slot migrates key by key, Redis runs a script only on
  the node that has every key it declares (else ``TRYAGAIN``, and the whole script is sent again), and stops it at
  a command on a key that node does not have, after the writes before it (Lua does not roll back). So a script
  declares every key it touches, or declares a key that never exists (``ENQUEUE_LUA``'s queue prefix, the batch
  prefix) so that it never runs while its slot moves; and it touches a key it may have emptied (deleted) no more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .keys import QUEUE_PREFIX, QUEUES, SCHEDULE

if TYPE_CHECKING:
    from .keys import Keyspace

KeysOf = Callable[..., list[str]]  # (keyspace, *names) -> the KEYS of one call


class LuaScript:
    """A script's source and ``keys(keyspace, *names)``, the KEYS of one call; call sites build them with it."""

    __slots__ = ("keys", "name", "source")

    def __init__(self, name: str, source: str, keys: KeysOf) -> None:
        self.name = name
        self.source = source
        self.keys = keys

    def __repr__(self) -> str:
        return f"LuaScript({self.name!r})"


_registered: dict[str, LuaScript] = {}


def lua_script(name: str, source: str, keys: KeysOf) -> LuaScript:
    """Declare a script: ``name`` is unique (e.g. ``"batch.add"``), ``keys(keyspace, *names)`` builds the KEYS of a
    call from the names it takes (queue names, ids) — its parameters are named, so the slot test can pass samples."""
    script = LuaScript(name, source, keys)
    known = _registered.get(name)
    if known is not None and known.source != source:
        raise ValueError(f"two Lua scripts are named {name!r}: give each its own name")
    _registered[name] = script
    return script


def registered_scripts() -> list[LuaScript]:
    """The scripts declared so far (those of the modules imported)."""
    return list(_registered.values())


# A Lua function for a script that pushes a job while it holds keys of kiq's shared slot (a batch's callback, a
# workflow's next step); the script's KEYS[k...] are ``enqueue_keys(keyspace)``. ``job`` is the payload's JSON text
# without its closing brace; ``now`` the time in epoch seconds, ``enqueued_at`` its wire form (``kiq.ext.wire_time``).
# Pushed as the client pushes (SADD queues, LPUSH queue:<name>, with ``enqueued_at``); but in the ``queue`` layout a
# queue's list is in a slot of its own, out of the script's reach: the job goes into the schedule set, due ``now``,
# and a worker's poller pushes it at once (atomic: at least once), woken by the PUBLISH on ``kiq:poller-wake``
# (kiq.keys.POLLER_WAKE, in the schedule key's tag: ``{kiq}schedule`` -> ``{kiq}kiq:poller-wake``). The prefix key
# ``queue:`` never exists: a script declaring it is refused whole (TRYAGAIN) while kiq's slot migrates, so the queue
# key it builds on it is never one the node has lost.
ENQUEUE_LUA = """
local function enqueue(k, queue, job, now, enqueued_at)
  if KEYS[k + 1] then
    redis.call('SADD', KEYS[k], queue)
    redis.call('LPUSH', KEYS[k + 1] .. queue, job .. ',"enqueued_at":' .. enqueued_at .. '}')
  else
    redis.call('ZADD', KEYS[k], now, job .. '}')
    redis.call('PUBLISH', string.sub(KEYS[k], 1, -9) .. 'kiq:poller-wake', 'schedule ' .. now)
  end
end
"""


def enqueue_keys(keyspace: Keyspace) -> list[str]:
    """The KEYS of ``ENQUEUE_LUA``'s ``enqueue``, all in kiq's shared slot: the ``queues`` set and the prefix of a
    queue's list (``queue:``, ``{kiq}queue:``), or in the ``queue`` layout the ``schedule`` set alone."""
    if keyspace.slots == "queue":
        return [keyspace.key(SCHEDULE)]
    return [keyspace.key(QUEUES), keyspace.key(QUEUE_PREFIX)]
