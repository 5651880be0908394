"""The limiters' keys and Lua scripts: each script decides and records one admission atomically, on Redis's own clock
(``TIME``), so hosts whose clocks disagree still share one limit. Each also records the limiter's definition in the
registry hash that ``kiq limiters`` lists (one ``HSET`` in the same round trip, so the listing never misses a limiter
in use).

Every script returns ``{granted, seconds, microseconds, wait_ms}``: 1 or 0, Redis's time of the decision, and when
refused, how long until a retry may succeed.

Every key is in kiq's shared slot on a Redis Cluster (``kiq.ext.keyspace``): a script's limiter and the registry share
it, and every limiter's script runs on the clock of the one primary that holds that slot. A command that may empty
(delete) a key comes after the script's last other use of that key: while the slot migrates, a node no longer
serves a key it does not have, and a script stopped there after its first write would have written half a decision.
"""

from __future__ import annotations

import kiq
import kiq.ext

KEY_PREFIX = "kiq:limiter:"  # + "<kind>:<name>": a limiter's state
REGISTRY = "kiq:limiters"  # HASH: "<kind>:<name>" -> the limiter's definition (JSON), for the listing
OVERRATED = "kiq:limiter:overrated"  # HASH: "<kind>:<name>" -> jobs rescheduled because that limiter was full


def limiter_keys(keys: kiq.ext.Keyspace, limiter: str) -> list[str]:
    """The KEYS of an admission: the limiter's state (``limiter``: its name, ``KEY_PREFIX`` + kind and name) and the
    registry."""
    return [keys.key(limiter), keys.key(REGISTRY)]


# KEYS: the holders (ZSET token -> expiry in ms), the registry. ARGV: limit, lock timeout ms, token, registry field,
# definition. Holders whose lock timed out (their worker was killed, or they ran too long) are dropped first.
CONCURRENT = kiq.ext.lua_script(
    "limiter.concurrent",
    """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
if redis.call('ZCOUNT', KEYS[1], string.format('(%.17g', now), '+inf') < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  return {1, t[1], t[2], 0}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)  -- last: it may empty (delete) the key
return {0, t[1], t[2], 50}
""",
    limiter_keys,
)

# KEYS: the log of admissions (ZSET token -> time in ms), the registry. ARGV: limit, interval ms, token, registry
# field, definition. A sliding window: an admission is granted while fewer than `limit` were granted in the last
# `interval`, so no span of that length ever holds more.
WINDOW = kiq.ext.lua_script(
    "limiter.window",
    """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = tonumber(ARGV[2])
redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
-- %.17g: Lua's own number-to-text keeps 14 digits, 0.1 ms of a time in ms, and the window would end up to that early
local since = string.format('(%.17g', now - interval)
if redis.call('ZCOUNT', KEYS[1], since, '+inf') < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - interval)
  return {1, t[1], t[2], 0}
end
local oldest = redis.call('ZRANGEBYSCORE', KEYS[1], since, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - interval)  -- last: it may empty (delete) the key
return {0, t[1], t[2], math.max(1, math.ceil(tonumber(oldest[2]) + interval - now))}
""",
    limiter_keys,
)

# KEYS: the bucket (HASH tokens, at), the registry. ARGV: capacity, interval ms, registry field, definition.
# A token bucket: it holds up to `capacity` tokens and refills continuously at `capacity` per `interval`; each
# admission takes one. A bucket unused for an interval is full again, so its key expires then.
BUCKET = kiq.ext.lua_script(
    "limiter.bucket",
    """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local capacity = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens'))
local at = tonumber(redis.call('HGET', KEYS[1], 'at'))
if tokens == nil or at == nil then
  tokens, at = capacity, now
end
tokens = math.min(capacity, tokens + math.max(0, now - at) * capacity / interval)
local granted, wait = 0, 0
if tokens >= 1 then
  tokens, granted = tokens - 1, 1
else
  wait = math.max(1, math.ceil((1 - tokens) * interval / capacity))
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'at', now)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {granted, t[1], t[2], wait}
""",
    limiter_keys,
)

# KEYS: the registry, the reschedule counts. What the listing reads, with the time on the clock the scripts above
# use (the primary of kiq's slot, on a cluster): {{seconds, microseconds}, registry fields and values, counts}.
LISTING = kiq.ext.lua_script(
    "limiter.listing",
    """
return {redis.call('TIME'), redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
""",
    lambda keys: [keys.key(REGISTRY), keys.key(OVERRATED)],
)
