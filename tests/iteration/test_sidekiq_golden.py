"""Golden fixtures: the ``it-<jid>`` hash and the re-pushed payload exactly as Sidekiq writes them, built by reading
Sidekiq's source (Sidekiq 7.3+ does not run here: the installed Ruby Sidekiq is 6.4). A job runs through a real
kiq Processor against a real Redis, and what it leaves in Redis is compared field for field.

Where each expected value comes from (sidekiq/sidekiq, lib/sidekiq/job/iterable.rb at v8.1.7 unless said; the
same at v7.3.9 but for the NX and the rescue):
- ``flush_state`` (l. 281-296): ``HSET it-<jid> ex <@_executions> c <dump_json(@_cursor)> rt <@_runtime>`` then
  ``EXPIRE it-<jid> 2592000 NX`` (v7.3.9 l. 257-270: plain EXPIRE) and ``HGET cancelled``, in one MULTI;
- ``@_runtime = 0`` (l. 32, an Integer: written "0") until the ``ensure`` of the walk adds the run's seconds
  (l. 241, a Float from then on: written as Ruby's Float#to_s);
- ``@_cursor = cursor`` (l. 211) is set before the flush check of that item: an interruption saves the cursor of
  the item not yet run (l. 216, 255-258: flush, then ``raise Interrupted``);
- an item's exception flushes first (l. 231-232, ``rescue Exception; flush_state; raise``: Sidekiq 8);
- ``cancel!`` (l. 61): ``HSETNX it-<jid> cancelled <Time.now.to_i>`` (integer seconds);
- completion ``cleanup`` (l. 302): ``UNLINK it-<jid>``;
- lib/sidekiq/job/interrupt_handler.rb l. 13-14: ``Sidekiq::Client.new.push(hash)`` then ``raise Skip`` (no retry
  counted): the payload as fetched keeps its ``jid`` and ``created_at`` (job_util.rb v7.3.9 l. 57, 61: ``||=``)
  and gets a new ``enqueued_at`` (client.rb v7.3.9 l. 280), pushed with ``SADD queues`` + ``LPUSH queue:<q>``.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import redis

import kiq
import kiq.ext
from kiq.keys import ITERATION_TTL
from kiq.payload import dumps, new_jid
from kiq.server.outcomes import RedisOutage
from kiq.server.processor import Processor
from tests.support import Unit

STOP = threading.Event()  # the processor's stopping flag: set by the job itself after item 2
RUBY_FLOAT = re.compile(r"\d+\.\d+(e[-+]\d\d)?")


class GoldenWalk(kiq.IterableJob):
    kiq_name = "GoldenWalk"
    kiq_options = {"queue": "golden"}

    def build_enumerator(self, fail_at: int, *, cursor: Any) -> Any:
        # Sidekiq's array enumerator's shape: (element, index), resumed by dropping ``cursor`` elements
        return ((f"row-{index}", index) for index in range(cursor or 0, 10))

    def each_iteration(self, item: str, fail_at: int) -> None:
        index = int(item.split("-")[1])
        if index == fail_at:
            raise ValueError(item)
        if index == 2:
            STOP.set()


def fetched(jid: str, fail_at: int) -> str:
    return dumps({"retry": True, "queue": "golden", "class": "GoldenWalk", "args": [fail_at], "jid": jid,
                  "created_at": 1732537000.25, "enqueued_at": 1732537001.5})  # fmt: skip


def run(config: kiq.Config, payload: str) -> Unit:
    STOP.clear()
    processor = Processor(config, fetcher=None, stopping=STOP, outage=RedisOutage(config), name="golden")  # type: ignore[arg-type]
    unit = Unit(payload, "golden")
    processor.process(unit)
    return unit


def test_an_interruption_writes_the_state_and_re_pushes_as_sidekiq_does(config: kiq.Config, r: redis.Redis) -> None:
    jid = new_jid()
    before = time.time()
    unit = run(config, fetched(jid, -1))
    assert unit.acked == 1  # the fetched copy is done with: Sidekiq's Skip acknowledges
    fields = r.hgetall(f"it-{jid}")
    assert fields.keys() == {"ex", "c", "rt"}
    assert fields["ex"] == "1" and fields["c"] == "3"  # items 0-2 ran; 3 is the next one
    assert RUBY_FLOAT.fullmatch(fields["rt"]), fields["rt"]  # the interrupt's flush comes after the ensure: a Float
    assert ITERATION_TTL - 5 <= r.ttl(f"it-{jid}") <= ITERATION_TTL
    assert r.smembers("queues") == {"golden"}
    [raw] = r.lrange("queue:golden", 0, -1)
    repushed = kiq.ext.loads(raw)
    expected = kiq.ext.loads(fetched(jid, -1))
    assert before <= repushed.pop("enqueued_at") <= time.time()
    del expected["enqueued_at"]
    assert repushed == expected  # same jid, created_at, retry: no retry_count, no error fields
    assert r.zcard("retry") == 0


def test_an_error_flushes_before_the_retry_and_completion_unlinks(config: kiq.Config, r: redis.Redis) -> None:
    jid = new_jid()
    run(config, fetched(jid, 1))
    # the first run's runtime is still Sidekiq's Integer 0: the rescue's flush comes before the ensure adds it
    assert r.hgetall(f"it-{jid}") == {"ex": "1", "c": "1", "rt": "0"}
    [entry] = r.zrange("retry", 0, -1)
    assert kiq.ext.loads(entry)["retry_count"] == 0
    r.delete("retry")
    kiq.cancel(jid)
    cancelled = r.hget(f"it-{jid}", "cancelled")
    assert cancelled is not None and cancelled.isdigit() and abs(int(cancelled) - time.time()) < 5
    unit = run(config, fetched(jid, 1))  # the retry sees the cancel at its start: completes, state unlinked
    assert unit.acked == 1 and not r.exists(f"it-{jid}") and r.llen("queue:golden") == 0 and r.zcard("retry") == 0
