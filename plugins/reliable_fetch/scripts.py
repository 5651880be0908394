"""The Lua scripts of the reliable fetcher: each is one atomic step, so no job is ever only in Python memory.

They touch list items as opaque strings (never cjson: re-encoding would turn ``[]`` into ``{}`` and round
floats), and use Redis 6.2 commands at most (``RPOP key count``, ``LMOVE``).
"""

from __future__ import annotations

# KEYS: working list, liveness key, queue keys in fetch order.
# ARGV: max jobs, liveness TTL (ms), then finished jobs to acknowledge first (one round trip for both).
# Returns a flat list of queue key, job pairs, oldest first.
FETCH = """
for i = 3, #ARGV do
  redis.call('LREM', KEYS[1], -1, ARGV[i])
end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
local wanted = tonumber(ARGV[1])
local fetched = {}
for i = 3, #KEYS do
  local jobs = redis.call('RPOP', KEYS[i], wanted)
  if jobs then
    redis.call('LPUSH', KEYS[1], unpack(jobs))
    for _, job in ipairs(jobs) do
      fetched[#fetched + 1] = KEYS[i]
      fetched[#fetched + 1] = job
    end
    wanted = wanted - #jobs
    if wanted == 0 then break end
  end
end
return fetched
"""

# KEYS: working (or recovering) list, queue key. ARGV: the job as listed, optionally the JSON to push instead.
# Puts the job back at the fetch end of its queue only if it was still in the list (so a job that was
# acknowledged, or already requeued, is not run twice). Returns 1 when it moved.
REQUEUE = """
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 1 then
  redis.call('RPUSH', KEYS[2], ARGV[2] or ARGV[1])
  return 1
end
return 0
"""

# KEYS: an orphaned list, its owner's liveness key, the recovering list of this process.
# Moves every job over (keeping their order) unless the owner is alive; returns how many moved, -1 if alive.
CLAIM = """
if redis.call('EXISTS', KEYS[2]) == 1 then
  return -1
end
local moved = 0
while redis.call('LMOVE', KEYS[1], KEYS[3], 'RIGHT', 'LEFT') do
  moved = moved + 1
end
return moved
"""
