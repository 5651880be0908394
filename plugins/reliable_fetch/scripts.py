"""The Lua scripts of the reliable fetcher: each is one atomic step, so no job is ever only in Python memory.

They touch list items as opaque strings (never cjson: re-encoding would turn ``[]`` into ``{}`` and round
floats), and use Redis 6.2 commands at most (``RPOP key count``, ``LMOVE``).

Each writes first what needs no memory (``PEXPIRE``, ``LREM``, ``LTRIM``, ``RPOP``) and only then what does.
When Redis is at ``maxmemory`` with ``noeviction`` it refuses commands that need memory (``LPUSH``, ``SET``...)
only until a script has written, so these scripts, which free as much as they take (a job moves from one list to
another: the fetch's ``LPUSH`` follows the ``RPOP`` that took those jobs), keep working then: a worker can drain
the queues, which is how an operator gets out of that state.
"""

from __future__ import annotations

import kiq

# KEYS: working list, liveness key, queue keys in fetch order.
# ARGV: max jobs, liveness TTL in ms (0: not refreshed this time), then finished jobs to acknowledge first (one
# round trip for both).
# Returns kiq.pop_script's reply (per queue: its key, how many, its jobs, oldest first).
# The acknowledgements cost two commands, not one LREM each: jobs mostly finish in the order they were fetched, so
# most finished ones are the oldest of the list (its right end); those are cut off with one LTRIM after one LRANGE
# of as many entries has shown which they are (compared as a multiset: identical payloads are distinct units), and
# only the others, finished out of order, take an LREM each. An LTRIM removes nothing but the entries it compared.
FETCH = kiq.pop_script(
    first_queue_key=3,
    into=1,
    before="""
local acks = #ARGV - 2
if acks > 0 then
  local pending = {}
  for i = 3, #ARGV do
    pending[ARGV[i]] = (pending[ARGV[i]] or 0) + 1
  end
  local oldest = redis.call('LRANGE', KEYS[1], -acks, -1)
  local trimmed = 0
  for i = #oldest, 1, -1 do
    local left = pending[oldest[i]]
    if not left or left == 0 then break end
    pending[oldest[i]] = left - 1
    trimmed = trimmed + 1
  end
  if trimmed > 0 then
    redis.call('LTRIM', KEYS[1], 0, -trimmed - 1)
  end
  if trimmed < acks then
    for i = 3, #ARGV do
      local left = pending[ARGV[i]]
      if left > 0 then
        redis.call('LREM', KEYS[1], -left, ARGV[i])
        pending[ARGV[i]] = 0
      end
    end
  end
end
if ARGV[2] ~= '0' and redis.call('PEXPIRE', KEYS[2], ARGV[2]) == 0 then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
end""",
)

# KEYS: liveness key. ARGV: its TTL in ms. Creates or refreshes it.
ALIVE = """
if redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 0 then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
end
return 1
"""

# KEYS: working (or recovering) list, queue key. ARGV: the job as listed, "front" (the end fetches take from, so
# it runs next) or "back" (behind every job waiting), optionally the JSON to push instead. Puts the job back only
# if it was still in the list (so a job that was acknowledged, or already requeued, is not run twice). Returns 1
# when it moved.
REQUEUE = """
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 1 then
  if ARGV[2] == 'back' then
    redis.call('LPUSH', KEYS[2], ARGV[3] or ARGV[1])
  else
    redis.call('RPUSH', KEYS[2], ARGV[3] or ARGV[1])
  end
  return 1
end
return 0
"""

# KEYS: an orphaned list, its owner's liveness key, the recovering list of this process, this process's liveness
# key. ARGV: its TTL in ms. Moves every job over (keeping their order) unless the owner is alive; returns how many
# moved, -1 if alive.
CLAIM = """
if redis.call('EXISTS', KEYS[2]) == 1 then
  return -1
end
redis.call('PEXPIRE', KEYS[4], ARGV[1])
local moved = 0
while redis.call('LMOVE', KEYS[1], KEYS[3], 'RIGHT', 'LEFT') do
  moved = moved + 1
end
return moved
"""

# KEYS: the recovery lease, this process's liveness key. ARGV: this process's identity, the lease in ms, the
# liveness TTL in ms. Takes the lease for a live process (refreshing its liveness first, which also lets the SET
# through at maxmemory); returns 1 when taken, 0 when another process holds it, -1 when this one is not alive.
LEASE = """
if redis.call('PEXPIRE', KEYS[2], ARGV[3]) == 0 then
  return -1
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
"""
