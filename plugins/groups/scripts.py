"""The Lua scripts of job groups: each is one atomic step over one queue's keys (keys.py), in that queue's slot.

The rotation is a list turned with ``LMOVE r r RIGHT LEFT``: the group at its right end takes its turn and goes to
the left end, behind every other, so each group with ready work gets one job per round (``""``, the queue's
ungrouped jobs, is one more member). A group leaves the rotation when its turn finds it empty, paused or at its
limit, and comes back when a push, an unpause, a freed slot or a new limit makes it ready again: a fetch never
walks idle, paused or full groups, whatever their number. Job strings are opaque, but a job found in the queue's own
list that names a group (one requeued, recovered or pushed by a process without the plugin) is decoded once and put
back at the front of its group.
"""

from __future__ import annotations

import kiq
import kiq.ext

from .keys import base

# Lua shared by the scripts. ``base`` is the queue's base key (KEYS); a group enters the rotation when it has ready
# work and is neither paused nor full, and a wake token tells a blocked fetcher.
ENSURE = r"""
local function ensure(g)
  if redis.call('SISMEMBER', base .. 'p', g) == 1 or redis.call('SISMEMBER', base .. 'f', g) == 1 then return end
  if redis.call('SADD', base .. 'm', g) == 1 then
    if redis.call('EXISTS', base .. 'r') == 0 then redis.call('LPUSH', base .. 'r', '') end
    redis.call('LPUSH', base .. 'r', g)
    if redis.call('LLEN', base .. 'w') == 0 then redis.call('LPUSH', base .. 'w', '1') end
  end
end
"""
RELEASE_LUA = r"""
local function release(member)
  if redis.call('ZREM', base .. 'l', member) == 0 then return end
  local g = string.sub(member, 1, (string.find(member, '\0', 1, true) or (#member + 1)) - 1)
  if redis.call('HINCRBY', base .. 'c', g, -1) <= 0 then redis.call('HDEL', base .. 'c', g) end
  if redis.call('SREM', base .. 'f', g) == 1 and redis.call('LLEN', base .. 'j:' .. g) > 0 then ensure(g) end
end
"""
CLOCK = r"""
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""
REROUTE_LUA = r"""
local function reroute(job)
  if not string.find(job, '"group":', 1, true) then return false end
  local ok, decoded = pcall(cjson.decode, job)
  if not ok or type(decoded) ~= 'table' then return false end
  local g, jid = decoded['group'], decoded['jid']
  if type(g) ~= 'string' or g == '' or string.find(g, '\0', 1, true) or type(jid) ~= 'string' then return false end
  redis.call('RPUSH', base .. 'j:' .. g, job)
  redis.call('RPUSH', base .. 'i:' .. g, jid)
  ensure(g)
  return true
end
"""
COMMON = ENSURE + RELEASE_LUA + CLOCK + REROUTE_LUA

# KEYS: the queue's base. ARGV: group, jid, job. A push: the job at the back of its group.
PUSH = kiq.ext.lua_script(
    "groups.push",
    "local base = KEYS[1]\n"
    + ENSURE
    + """
redis.call('LPUSH', base .. 'j:' .. ARGV[1], ARGV[3])
redis.call('LPUSH', base .. 'i:' .. ARGV[1], ARGV[2])
ensure(ARGV[1])
return 1
""",
    lambda keys, queue: [base(keys, queue)],
)

POP_SOURCE = (
    "if redis.replicate_commands then redis.replicate_commands() end\n"  # TIME before writes (Redis < 7)
    "local queue = KEYS[1]\nlocal base = KEYS[2]\nlocal into = KEYS[3]\n"
    + COMMON
    + r"""
local wanted, default, ttl, stride = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = nil  -- Redis's clock, read once a slot is leased or expired ones may be freed (not for ungrouped jobs)
local function clock()
  if not now then now = now_ms() end
  return now
end
local fetched, leased = {}, {}
local seen = false  -- a queue of this call has groups (a rotation or slots): the fetcher must keep asking here
local function drop(g)
  redis.call('LPOP', base .. 'r')
  redis.call('SREM', base .. 'm', g)
end
local function ungrouped()
  for _ = 1, 100 do
    local job = redis.call('RPOP', queue)
    if not job then return nil end
    if not reroute(job) then return job end
  end
  return nil
end
local function grouped(g)
  if redis.call('SISMEMBER', base .. 'p', g) == 1 then drop(g) return nil end
  local limit = tonumber(redis.call('HGET', base .. 'x', g)) or default
  local running = tonumber(redis.call('HGET', base .. 'c', g)) or 0
  if limit > 0 and running >= limit then
    drop(g)
    redis.call('SADD', base .. 'f', g)
    return nil
  end
  local job = redis.call('RPOP', base .. 'j:' .. g)
  local jid = redis.call('RPOP', base .. 'i:' .. g) or ''
  if not job then drop(g) return nil end
  local left = redis.call('LLEN', base .. 'j:' .. g)
  if limit == 0 then  -- no limit, no slot to keep
    if left == 0 then drop(g) end
    return job
  end
  local member = g .. '\0' .. jid
  if redis.call('ZADD', base .. 'l', clock() + ttl, member) == 1 then
    running = redis.call('HINCRBY', base .. 'c', g, 1)
  end
  if limit > 0 and running >= limit then
    drop(g)
    if left > 0 then redis.call('SADD', base .. 'f', g) end
  elseif left == 0 then
    drop(g)
  end
  leased[#leased + 1] = queue
  leased[#leased + 1] = member
  return job
end
for i = 1, #KEYS, stride do
  if wanted <= 0 then break end
  queue, base = KEYS[i], KEYS[i + 1]
  if stride == 3 then into = KEYS[i + 2] end
  if redis.call('EXISTS', base .. 'l') == 1 then
    seen = true
    for _, member in ipairs(redis.call('ZRANGEBYSCORE', base .. 'l', '-inf', clock(), 'LIMIT', 0, 100)) do
      release(member)
    end
  end
  local jobs = {}
  if redis.call('EXISTS', base .. 'r') == 0 then
    for _, job in ipairs(redis.call('RPOP', queue, wanted) or {}) do
      if not reroute(job) then jobs[#jobs + 1] = job end
    end
  else
    seen = true
    local idle, turns = 0, 0
    while #jobs < wanted and turns < 1000 do
      local size = redis.call('LLEN', base .. 'r')
      if size == 0 or idle >= size then break end
      local g = redis.call('LMOVE', base .. 'r', base .. 'r', 'RIGHT', 'LEFT')
      turns = turns + 1
      local job
      if g == '' then
        job = ungrouped()
        if not job and size == 1 then
          redis.call('DEL', base .. 'r')
          break
        end
      else
        job = grouped(g)
      end
      if job then
        jobs[#jobs + 1] = job
        idle = 0
      else
        idle = idle + 1
      end
    end
  end
  if #jobs > 0 then
    if stride == 3 then redis.call('LPUSH', into, unpack(jobs)) end
    fetched[#fetched + 1] = queue
    fetched[#fetched + 1] = #jobs
    for _, job in ipairs(jobs) do fetched[#fetched + 1] = job end
    wanted = wanted - #jobs
  end
end
if #leased > 0 then
  fetched[#fetched + 1] = ''
  fetched[#fetched + 1] = #leased
  for _, item in ipairs(leased) do fetched[#fetched + 1] = item end
end
if seen then fetched[#fetched + 1] = '!' end
return fetched
"""
)

# KEYS: (queue, its base) per queue of one slot, in fetch order. ARGV: most jobs, the default concurrency, the
# slot lease in ms, 2. Returns kiq.ext.pop_script's reply (per queue: its key, how many, its jobs), then, if slots
# were leased, "", twice their count and (queue key, slot) pairs, then "!" if a queue had groups (a rotation or
# slots): one flat list (a fetcher's connection checks a flat reply for large values).
POP = kiq.ext.lua_script(
    "groups.pop",
    POP_SOURCE,
    lambda keys, queues: [key for queue in queues for key in (keys.queue(queue), base(keys, queue))],
)
# The same, each job also pushed into a list beside its queue (a reliable fetcher's working list, named
# ``working``): KEYS (queue, base, list) per queue; ARGV as POP's but 3.
POP_INTO = kiq.ext.lua_script(
    "groups.pop_into",
    POP_SOURCE,
    lambda keys, queues, working: [
        key for queue in queues for key in (keys.queue(queue), base(keys, queue), keys.beside_queue(queue, working))
    ],
)

# KEYS: the queue's base. ARGV: slots (``<group>\0<jid>``). Frees them (a group left out at its limit comes back).
RELEASE = kiq.ext.lua_script(
    "groups.release",
    "local base = KEYS[1]\n" + ENSURE + RELEASE_LUA + "for i = 1, #ARGV do release(ARGV[i]) end\nreturn #ARGV\n",
    lambda keys, queue: [base(keys, queue)],
)

# KEYS: the queue's base. ARGV: the lease in ms, then slots this process holds. Extends those still held.
RENEW = kiq.ext.lua_script(
    "groups.renew",
    "if redis.replicate_commands then redis.replicate_commands() end\nlocal base = KEYS[1]\n"
    + CLOCK
    + """
local expires = now_ms() + tonumber(ARGV[1])
local renewed = 0
for i = 2, #ARGV do
  renewed = renewed + redis.call('ZADD', base .. 'l', 'XX', 'CH', expires, ARGV[i])
end
return renewed
""",
    lambda keys, queue: [base(keys, queue)],
)

# KEYS: the queue's base. ARGV: the group, then "limit" and a count ("" = the default), "pause" or "unpause".
CONTROL = kiq.ext.lua_script(
    "groups.control",
    "local base = KEYS[1]\n"
    + ENSURE
    + """
local g, what = ARGV[1], ARGV[2]
if what == 'pause' then
  return redis.call('SADD', base .. 'p', g)
end
if what == 'limit' then
  if ARGV[3] == '' then redis.call('HDEL', base .. 'x', g) else redis.call('HSET', base .. 'x', g, ARGV[3]) end
  redis.call('SREM', base .. 'f', g)
end
local changed = what == 'unpause' and redis.call('SREM', base .. 'p', g) or 1
if redis.call('LLEN', base .. 'j:' .. g) > 0 then ensure(g) end
return changed
""",
    lambda keys, queue: [base(keys, queue)],
)

# KEYS: the queue's base. ARGV: a job a blocking pop took from the queue's own list. 1 when it named a group and
# went back to the front of it (the fetcher then pops again), else 0 (an ungrouped job: the fetcher runs it).
REROUTE = kiq.ext.lua_script(
    "groups.reroute",
    "local base = KEYS[1]\n" + ENSURE + REROUTE_LUA + "return reroute(ARGV[1]) and 1 or 0\n",
    lambda keys, queue: [base(keys, queue)],
)

# KEYS: queues of one slot without groups, in fetch order. ARGV: most jobs. The plain pop (kiq.ext.pop_script) of a
# fetcher whose queues had no groups at its last look.
PLAIN = kiq.ext.lua_script("groups.plain", kiq.ext.pop_script(), lambda keys, queues: [keys.queue(q) for q in queues])
