"""The Lua scripts of the reliable fetcher: each is one atomic step, so no job is ever only in Python memory.

They touch list items as opaque strings (never cjson: re-encoding would turn ``[]`` into ``{}`` and round
floats), and use Redis 6.2 commands at most (``RPOP key count``, ``LMOVE``).

Each writes first what needs no memory (``PEXPIRE``, ``LREM``, ``RPOP``) and only then what does.
When Redis is at ``maxmemory`` with ``noeviction`` it refuses commands that need memory (``LPUSH``, ``SET``...)
only until a script has written, so these scripts, which free as much as they take (a job moves from one list to
another: the fetch's ``LPUSH`` follows the ``RPOP`` that took those jobs), keep working then: a worker can drain
the queues, which is how an operator gets out of that state.
"""

from __future__ import annotations

from typing import Any

import kiq
import kiq.ext

from .keys import LEASE_KEY, alive_key


def _cut(count: str, newest: str) -> str:
    """Lua setting ``cut``: the trim by count (ledger.py) of the working list ``KEYS[1]``, removing its ``count``
    oldest entries if the newest of them is ``newest`` (one LINDEX: one job string into Lua per trim, not one per
    job); how many it cut, or -1 when the list is not what the fetcher's ledger says (it then reconciles by
    comparing strings)."""
    return f"""
local cut = 0
local count = tonumber({count})
if count > 0 then
  if redis.call('LINDEX', KEYS[1], -count) == {newest} then
    redis.call('LTRIM', KEYS[1], 0, -count - 1)
    cut = count
  else
    cut = -1
  end
end
"""


# KEYS: (working list, queue) pairs in fetch order, all in one slot: in the queue layout each queue has its own
# working list beside it (standalone and ``slots = "one"``: one list, the same in every pair).
# ARGV: max jobs, then the trim of the first working list: how many oldest entries, the newest of them.
# Returns the trim's result (``_cut``), then kiq.ext.pop_script's reply (per queue: its key, how many, its jobs, oldest
# first).
# Safe while a cluster migrates the slot: Redis checks the declared keys before the script runs (one missing in a
# migrating slot: ASK or TRYAGAIN, the script does not run and is sent again), and inside it each RPOP is followed
# by its LPUSH into a working list that exists, because the trim, which may empty that list, comes last. (A trim
# first could delete the list, and the LPUSH into a key missing in a migrating slot is refused as "non local":
# jobs popped and never pushed.) At maxmemory the RPOP (which needs no memory) writes first, so the LPUSH is let
# through, as the jobs move from one list to another.
# The liveness key is refreshed by a command of its own when due, before the fetch (fetch.py, Liveness): it lives in
# kiq's shared slot, which is not the queues' in the queue layout.
FETCH = kiq.ext.lua_script(
    "reliable_fetch.fetch",
    """
local wanted = tonumber(ARGV[1])
local fetched = {0}
for i = 2, #KEYS, 2 do
  local jobs = redis.call('RPOP', KEYS[i], wanted)
  if jobs then
    redis.call('LPUSH', KEYS[i - 1], unpack(jobs))
    fetched[#fetched + 1] = KEYS[i]
    fetched[#fetched + 1] = #jobs
    for _, job in ipairs(jobs) do
      fetched[#fetched + 1] = job
    end
    wanted = wanted - #jobs
    if wanted == 0 then break end
  end
end
"""
    + _cut("ARGV[2]", "ARGV[3]")
    + """
fetched[1] = cut
return fetched
""",
    lambda keys, working, queues: [
        key for queue in queues for key in (keys.beside_queue(queue, working), keys.queue(queue))
    ],
)

# KEYS: a working list. ARGV: how many oldest entries to trim, the newest of them. Returns ``_cut``'s result.
TRIM = kiq.ext.lua_script(
    "reliable_fetch.trim",
    _cut("ARGV[1]", "ARGV[2]") + "return cut\n",
    lambda keys, queue, working: [keys.beside_queue(queue, working)],
)


def trim_command(key: str, count: int, newest: str) -> list[Any]:
    """``TRIM`` of list ``key`` for ``kiq.ext.run_pipeline`` (an ``EVAL``: see ``requeue_command``)."""
    return ["EVAL", TRIM.source, 1, key, count, newest]


# KEYS: liveness key. ARGV: its TTL in ms. Creates or refreshes it.
ALIVE = kiq.ext.lua_script(
    "reliable_fetch.alive",
    """
if redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 0 then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
end
return 1
""",
    lambda keys, identity: [keys.key(alive_key(identity))],
)

# KEYS: working (or recovering) list, queue key (beside it). ARGV: the job as listed, "front" (the end fetches take
# from, so it runs next) or "back" (behind every job waiting), optionally the JSON to push instead. Puts the job back
# only if it was still in the list (so a job that was acknowledged, or already requeued, is not run twice). Returns
# 1 when it moved.
REQUEUE = kiq.ext.lua_script(
    "reliable_fetch.requeue",
    """
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 1 then
  if ARGV[2] == 'back' then
    redis.call('LPUSH', KEYS[2], ARGV[3] or ARGV[1])
  else
    redis.call('RPUSH', KEYS[2], ARGV[3] or ARGV[1])
  end
  return 1
end
return 0
""",
    lambda keys, job_list, queue: [keys.beside_queue(queue, job_list), keys.queue(queue)],
)


def requeue_command(keys: kiq.ext.Keyspace, job_list: str, queue: str, *args: str) -> list[Any]:
    """``REQUEUE`` of one job of list ``job_list`` (beside ``queue``) for ``kiq.ext.run_pipeline``: an ``EVAL``, as a
    pipeline cannot load a script that a node does not know yet (and a cluster's refuses ``evalsha``)."""
    return ["EVAL", REQUEUE.source, 2, *REQUEUE.keys(keys, job_list, queue), *args]


# KEYS: an orphaned list, this process's recovering list beside it, and where they share that slot (not in the
# queue layout, whose caller checks and refreshes them just before: recovery.py) the orphan's owner's liveness key
# and this process's. ARGV: this process's liveness TTL in ms. Moves every job over (keeping their order) unless the
# owner is alive; returns how many moved, -1 if alive.
CLAIM = kiq.ext.lua_script(
    "reliable_fetch.claim",
    """
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then
  return -1
end
if KEYS[4] then
  redis.call('PEXPIRE', KEYS[4], ARGV[1])
end
local moved = 0
while redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT') do
  moved = moved + 1
end
return moved
""",
    lambda keys, orphan, recovering, queue, owner, identity: [
        keys.beside_queue(queue, orphan),
        keys.beside_queue(queue, recovering),
        *([] if keys.slots == "queue" else [keys.key(alive_key(owner)), keys.key(alive_key(identity))]),
    ],
)

# KEYS: the recovery lease, this process's liveness key. ARGV: this process's identity, the lease in ms, the
# liveness TTL in ms. Takes the lease for a live process (refreshing its liveness first, which also lets the SET
# through at maxmemory); returns 1 when taken, 0 when another process holds it, -1 when this one is not alive.
LEASE = kiq.ext.lua_script(
    "reliable_fetch.lease",
    """
if redis.call('PEXPIRE', KEYS[2], ARGV[3]) == 0 then
  return -1
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
""",
    lambda keys, identity: [keys.key(LEASE_KEY), keys.key(alive_key(identity))],
)
