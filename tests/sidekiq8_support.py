"""Sidekiq 8's golden fixtures (``tests/fixtures/sidekiq8/``, whose README names the Ruby source each one follows),
written to Redis exactly as Sidekiq 8 writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis

FIXTURES = Path(__file__).parent / "fixtures" / "sidekiq8"
SORTED_ENTRIES = ("scheduled", "retry_first_failure", "retry_retried", "dead")
PROCESSES = ("process_8_0_9", "process_8_1_7")


def fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return loaded


def ruby_json(value: Any) -> str:
    """``Sidekiq.dump_json`` (Ruby's ``JSON.generate``): compact, keys in insertion order, UTF-8 as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def seconds(milliseconds: int) -> float:
    """A Sidekiq 8 payload time as the epoch seconds it means."""
    return milliseconds / 1000


def write_sidekiq8_data(r: redis.Redis, beat: float) -> None:
    """Every fixture in Redis as Sidekiq 8 leaves it: the enqueued job, the schedule/retry/dead entries, and two
    live processes (heartbeat at ``beat``) with the job one of them runs."""
    enqueued = fixture("enqueued")
    pipe = r.pipeline(transaction=True)
    pipe.sadd("queues", "default")
    pipe.lpush(enqueued["key"], ruby_json(enqueued["payload"]))
    for name in SORTED_ENTRIES:
        entry = fixture(name)
        pipe.zadd(entry["key"], {ruby_json(entry["payload"]): entry["score"]})
    for name in PROCESSES:
        process = fixture(name)
        identity = process["identity"]
        pipe.sadd("processes", identity)
        pipe.hset(identity, mapping={"info": ruby_json(process["info"]), **process["fields"], "beat": repr(beat)})
        pipe.expire(identity, 60)
        if process["work"]:
            pipe.hset(f"{identity}:work", mapping={tid: ruby_json(work) for tid, work in process["work"].items()})
            pipe.expire(f"{identity}:work", 60)
    pipe.execute()
