"""Every change to a running workflow is one run of one Lua program, keyed by (workflow, step), so it is atomic
and running it twice for the same step changes nothing the second time:

- ``succeeded``: the step's result is recorded, each step waiting for it counts one less, and a step whose count
  reaches 0 is pushed (``LPUSH``, its payload joined from its pieces and the results it waits for) in the same run.
  A worker killed after the run has pushed the successors already; one killed before it leaves the step
  unacknowledged, so it runs again (reliable fetch) and this run happens then. Two members finishing at once are
  two runs, one after the other: only the second sees the count reach 0. A step whose joined payload would be
  over ``max_payload_bytes`` (a chord body given four 6 MB results) is not pushed: it dies, failing the workflow,
  with an error that names its size, the limit and the fix.
- ``failed``: an attempt raised and a retry is pending (recorded for the status only).
- ``died``: the step is dead. Unless its death is tolerated (a chord member with ``allow_failures``: recorded as
  a None result, then as ``succeeded``), the workflow fails: its state is the once-only marker, checked and set in
  the run that pushes the on_error handler, so it is pushed once.
- ``skipped``: a step found its workflow failed before it ran.

Every change refreshes the workflow's expiry (``workflow_retention``). A call declares every key of the workflow in
KEYS (on a Redis Cluster all in kiq's shared slot): while that slot migrates to another node key by key, Redis runs
the program only on the node that has all of them (else TRYAGAIN: kiq.resharding sends it again), so it never
writes half a change, nor reads a key the other node still has as missing. A key the program empties (the last
pending payload) is not touched again in the same run. A step is pushed by ``kiq.ext.ENQUEUE_LUA``: in the
cluster's ``queue`` layout, where a queue's list is in a slot of its own, it goes into the schedule set, due now,
and a poller pushes it.
"""

from __future__ import annotations

import time
from typing import Any

import redis

import kiq
import kiq.ext

from .keys import all_keys

# KEYS: the workflow's key, its parts (keys.PARTS, in that order) and ``kiq.ext.enqueue_keys``. ARGV: the change,
# the step id, the time (epoch seconds, as text), the time as a pushed job's enqueued_at (kiq.ext.wire_time: the
# sidekiq_wire setting's form), the retention, max_payload_bytes, the workflow id, its own arguments.
SOURCE = (
    kiq.ext.ENQUEUE_LUA
    + """
local op, step, now, enqueued_at = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ttl, limit, workflow_id = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local base = KEYS[1]
local PARTS = {steps = 2, payload = 3, wait = 4, state = 5, result = 6, error = 7}
local function key(part) return KEYS[PARTS[part]] end
local payload_gone = false  -- this run emptied the payload hash: Redis deleted it

local function keep()
  redis.call('EXPIRE', base, ttl)
  for _, part in ipairs({'steps', 'wait', 'state', 'result', 'error'}) do
    redis.call('EXPIRE', key(part), ttl)
  end
  if not payload_gone then redis.call('EXPIRE', key('payload'), ttl) end
end

local function join(pieces, given)
  local out = {}
  for i, piece in ipairs(pieces) do
    local kind = string.sub(piece, 1, 1)
    if kind == 'L' then out[i] = string.sub(piece, 2)
    elseif kind == 'R' then out[i] = redis.call('HGET', key('result'), string.sub(piece, 2)) or 'null'
    else out[i] = given end
  end
  return table.concat(out)
end

local function push(queue, job) enqueue(8, queue, job, now, enqueued_at) end

-- every successor's count, and the pieces of each it would push, still there: Redis expires a workflow's keys one
-- by one, and a step that ends in between must write nothing rather than half a workflow
local function intact(graph)
  for _, waiting in ipairs(graph['next']) do
    local count = redis.call('HGET', key('wait'), waiting)
    if not count then return false end
    if tonumber(count) == 1 and (redis.call('HEXISTS', key('payload'), waiting) == 0
        or redis.call('HEXISTS', key('steps'), waiting) == 0) then return false end
  end
  return true
end

-- the workflow fails: its state is the once-only marker; its on_error handler gets (workflow id, jid, error)
local function fail(error, handler_input)
  redis.call('HSET', base, 'state', 'failed', 'finished_at', now, 'error', error)
  local handler = redis.call('HGET', base, 'on_error')
  if handler then push(redis.call('HGET', base, 'on_error_queue'), join(cjson.decode(handler), handler_input)) end
  return 3
end

-- a successor whose payload, joined from the results it waits for, is over max_payload_bytes is never pushed (a
-- chord of four 6 MB results would be a 24 MB job): it dies, failing the workflow, and says why
local function oversized(waiting, found, size)
  local message = 'WorkflowError: the payload of workflow step ' .. waiting .. ' (' .. tostring(found['class'])
    .. ') would be ' .. size .. ' bytes with the results of the steps before it, more than max_payload_bytes = '
    .. limit .. '; not pushed. Pass large results by reference (a file or object URL, a database id), or raise '
    .. 'max_payload_bytes (KIQ_MAX_PAYLOAD_BYTES)'
  redis.call('HSET', key('state'), waiting, 'dead')
  redis.call('HSET', key('error'), waiting, message)
  payload_gone = redis.call('HLEN', key('payload')) == 1
  redis.call('HDEL', key('payload'), waiting)
  local error = cjson.encode({jid = found['jid'], class = found['class'], message = message})
  return fail(error, cjson.encode(workflow_id) .. ',' .. cjson.encode(found['jid']) .. ',' .. error)
end

local function finish(graph)
  for _, waiting in ipairs(graph['next']) do
    if redis.call('HINCRBY', key('wait'), waiting, -1) == 0 then
      local found = cjson.decode(redis.call('HGET', key('steps'), waiting))
      local job = join(cjson.decode(redis.call('HGET', key('payload'), waiting)), '')
      if #job > limit then return oversized(waiting, found, #job) end
      push(found['queue'], job)
      payload_gone = redis.call('HLEN', key('payload')) == 1
      redis.call('HDEL', key('payload'), waiting)
      redis.call('HSET', key('state'), waiting, 'enqueued')
    end
  end
  if redis.call('HINCRBY', base, 'left', -1) == 0 then
    redis.call('HSET', base, 'state', 'succeeded', 'finished_at', now)
    return 2
  end
  return 1
end

local state = redis.call('HGET', base, 'state')
if not state then return 0 end
local graph = redis.call('HGET', key('steps'), step)
if not graph then return -1 end  -- no such step: another producer's payload, or the graph expired
graph = cjson.decode(graph)
local current = redis.call('HGET', key('state'), step)
if op == 'skipped' then
  if state == 'failed' and (current == 'enqueued' or current == 'failed') then
    redis.call('HSET', key('state'), step, 'skipped')
    return 1
  end
  return 0
end
if current == 'succeeded' or current == 'dead' then return 0 end
if not intact(graph) then return -1 end

-- after the workflow failed, a step still running is recorded, and pushes nothing
local change = 1
if op == 'succeeded' then
  redis.call('HSET', key('state'), step, 'succeeded')
  redis.call('HSET', key('result'), step, ARGV[8])
  if state == 'running' then change = finish(graph) end
elseif op == 'failed' then
  redis.call('HSET', key('state'), step, 'failed')
  redis.call('HSET', key('error'), step, ARGV[8])
elseif op == 'died' then
  redis.call('HSET', key('state'), step, 'dead')
  redis.call('HSET', key('error'), step, ARGV[8])
  if state == 'running' then
    if graph['tolerant'] then
      redis.call('HSET', key('result'), step, 'null')
      change = finish(graph)
    else
      change = fail(ARGV[9], ARGV[10])
    end
  end
end
keep()
return change
"""
)
SCRIPT = kiq.ext.lua_script(
    "workflow.step", SOURCE, lambda keys, workflow_id: [*all_keys(keys, workflow_id), *kiq.ext.enqueue_keys(keys)]
)

# what a run answers (the program's return value): the metrics count steps and workflows from it, with no read
UNCHANGED, CHANGED, WORKFLOW_SUCCEEDED, WORKFLOW_FAILED = 0, 1, 2, 3


OOM_IN_SCRIPT = "OOM command not allowed"


class Steps:
    """The step program of one config's Redis."""

    def __init__(self, config: kiq.Config) -> None:
        self.config = config
        self.script = config.redis.register_script(SCRIPT.source)
        self.keyspace = kiq.ext.keyspace(config.redis)

    def run(self, op: str, workflow_id: str, step: str, *args: str) -> int:
        """Apply ``op`` to ``step``: ``UNCHANGED`` (done before, the workflow is over or expired, or it has no such
        step), ``CHANGED``, or ``WORKFLOW_SUCCEEDED`` / ``WORKFLOW_FAILED`` when this change ended the workflow (once
        per workflow)."""
        keys = SCRIPT.keys(self.keyspace, workflow_id)
        now = time.time()
        enqueued_at = repr(kiq.ext.wire_time(now, self.config.sidekiq_wire))
        retention, limit = self.config.get("workflow_retention"), self.config.get("max_payload_bytes")
        argv: list[Any] = [op, step, repr(now), enqueued_at, retention, limit, workflow_id, *args]
        try:
            return max(int(self.script(keys=keys, args=argv)), UNCHANGED)  # -1: no such step, nothing written
        except redis.ResponseError as error:
            if OOM_IN_SCRIPT in str(error):  # Redis < 7 says maxmemory's refusal of a script's write so
                raise redis.exceptions.OutOfMemoryError(str(error)) from error  # held and retried, as on Redis 7
            raise
