"""Every change to a batch is one run of one Lua program, so each is atomic, and each is keyed by the job or block it
concerns (sets of jids, never a counter): running it twice for the same jid changes nothing the second time.

- ``create`` / ``open``: a ``with batch:`` block starts (a token in ``open`` keeps the batch from completing while
  jobs are being added);
- ``add``: the jobs a block pushed are registered; the block's last call removes its token;
- ``succeeded`` / ``failed`` / ``died``: a job's outcome. A job may be seen before its block registered it (it ran
  that fast): it counts all the same, and the later registration skips it. A success is final.

After each change the batch is evaluated: it is complete when no block is open, every child batch is complete and
every pending job has failed (pending == failed); it succeeded when nothing is pending and every child succeeded.
An event (complete, success, death) fires once: its time field is the marker, checked and set in the same run that
pushes the callback job (``LPUSH``), so no two runs can both fire it and no crash can record it without the push.
A child's events settle it in its parent (and its callbacks join the parent as jobs) in the same run, up the tree;
a death fires for the batch and each ancestor, once each.

A batch's keys are built from bids inside the program (a parent is only known in Redis), by appending to the prefix
key ``kiq:batch:`` that each call declares in KEYS: on a Redis Cluster that is ``{kiq}kiq:batch:``, so every batch
is in kiq's shared slot. A callback is pushed by ``kiq.ext.ENQUEUE_LUA``: in the cluster's ``queue`` layout, where a
queue's list is in a slot of its own, it goes into the schedule set, due now, and a poller pushes it.
"""

from __future__ import annotations

import time
from typing import Any

from redis import exceptions as redis_errors

import kiq
import kiq.ext

from .keys import PREFIX, index_key

# KEYS: the prefix of a batch's keys, the index, and ``kiq.ext.enqueue_keys``. ARGV: the change, the time (epoch
# seconds, as text), the time as a pushed job's enqueued_at (kiq.ext.wire_time: the sidekiq_wire setting's form), the
# TTLs while pending and after success, the bid, its own arguments.
SOURCE = (
    kiq.ext.ENQUEUE_LUA
    + """
local op, now, enqueued_at = ARGV[1], ARGV[2], ARGV[3]
local pending_ttl, done_ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
local PARTS = {'', ':jids', ':pending', ':failed', ':died', ':open', ':kids'}
local INDEX = KEYS[2]

local function key(bid, part) return KEYS[1] .. bid .. (part or '') end

local function keep(bid, ttl)
  for _, part in ipairs(PARTS) do redis.call('EXPIRE', key(bid, part), ttl) end
end

-- gone (expired), or succeeded: nothing changes a batch any more
local function final(bid)
  return redis.call('EXISTS', key(bid)) == 0 or redis.call('HEXISTS', key(bid), 'success_at') == 1
end

local evaluate

local function push_callback(bid, event)
  local found = redis.call('HMGET', key(bid), 'cb:' .. event, 'cbq:' .. event, 'cbj:' .. event, 'parent')
  local payload, queue, jid, parent = found[1], found[2], found[3], found[4]
  if not payload then return end
  if parent and redis.call('EXISTS', key(parent)) == 1 then
    -- a child's callback is a job of its parent: the parent completes only after it ran
    if redis.call('SISMEMBER', key(parent, ':jids'), jid) == 0 then
      redis.call('SADD', key(parent, ':pending'), jid)
      redis.call('SADD', key(parent, ':jids'), jid)
    end
    keep(parent, pending_ttl)
  end
  enqueue(3, queue, string.sub(payload, 1, -2), now, enqueued_at)
end

-- once per batch and event: the marker is set after the push, so a push that fails leaves it unset
local function fire(bid, event)
  if redis.call('HEXISTS', key(bid), event .. '_at') == 1 then return false end
  push_callback(bid, event)
  redis.call('HSET', key(bid), event .. '_at', now)
  return true
end

local function settle_child(bid, child, state)
  if final(bid) or redis.call('HGET', key(bid, ':kids'), child) == 'success' then return end
  redis.call('HSET', key(bid, ':kids'), child, state)
  evaluate(bid)
end

evaluate = function(bid)
  local running, failed_kids = 0, 0
  for _, state in ipairs(redis.call('HVALS', key(bid, ':kids'))) do
    if state == 'running' then running = running + 1 elseif state == 'complete' then failed_kids = failed_kids + 1 end
  end
  local pending = redis.call('SCARD', key(bid, ':pending'))
  local open = redis.call('SCARD', key(bid, ':open'))
  if running > 0 or open > 0 or pending ~= redis.call('SCARD', key(bid, ':failed')) then
    keep(bid, pending_ttl)
    return
  end
  local parent = redis.call('HGET', key(bid), 'parent')
  local completed = fire(bid, 'complete')
  if pending == 0 and failed_kids == 0 then
    if fire(bid, 'success') and parent then settle_child(parent, bid, 'success') end
    keep(bid, done_ttl)
  else
    if completed and parent then settle_child(parent, bid, 'complete') end
    keep(bid, pending_ttl)
  end
end

local function death(bid)
  while bid and redis.call('EXISTS', key(bid)) == 1 and fire(bid, 'death') do
    bid = redis.call('HGET', key(bid), 'parent')
  end
end

-- Jobs' outcomes. A jid joins ``jids`` last: if Redis fails a command halfway (a script is not rolled back), the
-- outcome sent again finds the job new and does the rest; each command is idempotent, so the whole is. Successes
-- come many jids at a time (ARGV[7...]): one evaluation for all of them ends in the state and events one per jid would.
local function succeeded(bid)
  if final(bid) then return end
  redis.call('SREM', key(bid, ':pending'), unpack(ARGV, 7))
  redis.call('SREM', key(bid, ':failed'), unpack(ARGV, 7))
  redis.call('SREM', key(bid, ':died'), unpack(ARGV, 7))
  redis.call('SADD', key(bid, ':jids'), unpack(ARGV, 7))  -- there already, unless it ran before its block registered it
  evaluate(bid)
end

local function failed(bid, jid, died)
  if final(bid) then return end
  local known = redis.call('SISMEMBER', key(bid, ':jids'), jid) == 1
  if known and redis.call('SISMEMBER', key(bid, ':pending'), jid) == 0 then
    return  -- it succeeded before: that stands
  end
  if died then
    redis.call('SADD', key(bid, ':died'), jid)
    death(bid)  -- first, so that a parent also waits for the death callbacks
  end
  redis.call('SADD', key(bid, ':pending'), jid)  -- there already, unless it ran before its block registered it
  redis.call('SADD', key(bid, ':failed'), jid)
  redis.call('SADD', key(bid, ':jids'), jid)
  evaluate(bid)
end

local bid = ARGV[6]
if op == 'create' then
  local parent, token, created_at = ARGV[7], ARGV[8], ARGV[9]
  if redis.call('EXISTS', key(bid)) == 1 then return 'exists' end
  if parent ~= '' then
    if final(parent) then return 'parent' end
    redis.call('HSET', key(parent, ':kids'), bid, 'running')
    keep(parent, pending_ttl)
    redis.call('HSET', key(bid), 'parent', parent)
  end
  redis.call('HSET', key(bid), 'created_at', created_at, unpack(ARGV, 10))
  redis.call('SADD', key(bid, ':open'), token)
  redis.call('ZADD', INDEX, created_at, bid)
  for _, old in ipairs(redis.call('ZRANGE', INDEX, 0, 9)) do  -- the index forgets expired batches
    if redis.call('EXISTS', key(old)) == 0 then redis.call('ZREM', INDEX, old) end
  end
  keep(bid, pending_ttl)
elseif op == 'open' or op == 'add' then
  if redis.call('EXISTS', key(bid)) == 0 then return 'gone' end
  if final(bid) then return 'succeeded' end
  local token = ARGV[7]
  if op == 'open' then
    if token ~= '' then redis.call('SADD', key(bid, ':open'), token) keep(bid, pending_ttl) end
    return 'ok'
  end
  for i = 8, #ARGV do  -- a job seen already (it ran first) keeps its outcome
    if redis.call('SISMEMBER', key(bid, ':jids'), ARGV[i]) == 0 then
      redis.call('SADD', key(bid, ':pending'), ARGV[i])
      redis.call('SADD', key(bid, ':jids'), ARGV[i])
    end
  end
  if token ~= '' then redis.call('SREM', key(bid, ':open'), token) end
  evaluate(bid)
elseif op == 'succeeded' then
  succeeded(bid)
elseif op == 'failed' or op == 'died' then
  failed(bid, ARGV[7], op == 'died')
else
  return redis.error_reply('unknown batch change ' .. tostring(op))
end
return 'ok'
"""
)
SCRIPT = kiq.ext.lua_script(
    "batch.change",
    SOURCE,
    lambda keys: [keys.key(PREFIX), index_key(keys), *kiq.ext.enqueue_keys(keys)],
)

# what a change answers besides "ok": the batch cannot take it
EXISTS, GONE, SUCCEEDED, PARENT_FINAL = "exists", "gone", "succeeded", "parent"


class Changes:
    """The program, registered on a config's Redis, and the arguments of each change (TTLs from the settings)."""

    def __init__(self, config: kiq.Config) -> None:
        self.config = config
        self.script = config.redis.register_script(SCRIPT.source)
        self.keys = SCRIPT.keys(kiq.ext.keyspace(config.redis))

    def argv(self, op: str, bid: str, *rest: str) -> list[Any]:
        expiry: int = self.config.get("batch_expiry")
        retention: int = self.config.get("batch_retention")
        now = time.time()
        return [op, repr(now), repr(kiq.ext.wire_time(now, self.config.sidekiq_wire)), expiry, retention, bid, *rest]

    def run(self, argv: list[Any]) -> str:
        """Run one change now; its answer ("ok", or why the batch cannot take it)."""
        return str(self.script(keys=self.keys, args=argv))

    def run_many(self, argvs: list[list[Any]]) -> list[Any]:
        """Run changes in one round trip; each one's answer, or the error Redis gave it (changes are idempotent:
        a run that fails can be sent again)."""
        commands = [("EVALSHA", self.script.sha, len(self.keys), *self.keys, *argv) for argv in argvs]
        replies = kiq.ext.run_pipeline(self.config.redis, commands, raise_on_error=False)
        if any(isinstance(reply, redis_errors.NoScriptError) for reply in replies):  # a restarted or flushed Redis
            self.config.redis.script_load(SOURCE)
            replies = kiq.ext.run_pipeline(self.config.redis, commands, raise_on_error=False)
        return replies

    async def run_async(self, argv: list[Any]) -> str:
        """Run one change from asyncio code, on the event loop's connection of the config."""
        redis = kiq.AsyncClient(self.config).redis
        keys = SCRIPT.keys(kiq.ext.keyspace(redis))
        return str(await redis.register_script(SCRIPT.source)(keys=keys, args=argv))
