"""What the pollers' wake-up costs a scheduled push, in µs: the ``PUBLISH kiq:poller-wake`` that every push of a
scheduled job (``perform_in``/``perform_at``) and every recorded retry sends in its round trip
(core/server/scheduled.py), with three pollers subscribed (processes of their own), against the same round trip
without it.

    .venv/bin/python -m bench.schedule_cost REDIS_URL [--count 20000]

Prints ``{"rows": [{"what", "plain_us", "us", "added_us"}, ...]}`` as JSON (bench/arguments_cost.py's shape);
bench/profile.py runs it (``make bench``'s ``profile`` part) and bench/all.py shows its rows among the features'
costs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

import kiq
import kiq.ext
from kiq.keys import POLLER_WAKE, SCHEDULE, keyspace, poller_wake
from kiq.pipeline import run_pipeline

POLLERS = 3  # workers subscribed: Redis writes each message to each of them


class BenchLater(kiq.Job):
    kiq_name = "BenchScheduleLater"

    def perform(self) -> None:
        pass


def _us(step: Callable[[], Any], count: int) -> float:
    step()
    return min(timeit.repeat(step, number=count, repeat=5)) / count * 1e6


# a poller's subscription, in a process of its own as a worker's is
READER = """
import sys, redis
pubsub = redis.Redis.from_url(sys.argv[1]).pubsub(ignore_subscribe_messages=True)
pubsub.subscribe(sys.argv[2])
print("subscribed", flush=True)
for _ in pubsub.listen():
    pass
"""


def _subscribers(url: str, channel: str) -> list[subprocess.Popen[str]]:
    """``POLLERS`` processes that read the wake channel as pollers do (so Redis writes each message to each)."""
    readers = [
        subprocess.Popen([sys.executable, "-c", READER, url, channel], stdout=subprocess.PIPE, text=True)
        for _ in range(POLLERS)
    ]
    for reader in readers:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "subscribed"
    return readers


def measure(url: str, count: int) -> list[dict[str, Any]]:
    redis = kiq.default_config().redis
    keys = keyspace(redis)
    key = keys.key(SCHEDULE)
    member = kiq.ext.dumps({"class": "BenchScheduleLater", "args": [], "jid": "0" * 24, "queue": "default"})
    at = time.time() + 3600
    readers = _subscribers(url, keys.key(POLLER_WAKE))
    try:
        zadd = [("ZADD", key, at, member)]
        plain = _us(lambda: run_pipeline(redis, zadd), count)
        us = _us(lambda: run_pipeline(redis, [*zadd, poller_wake(keys, SCHEDULE, at)]), count)
        publish = redis.info("commandstats").get("cmdstat_publish", {})
        rows = [{"what": "scheduled push or retry: the pollers' wake-up (PUBLISH, 3 subscribed) in its round trip",
                 "plain_us": plain, "us": us, "added_us": us - plain,
                 "redis_us": publish.get("usec_per_call")}]  # fmt: skip
        redis.delete(key)
        single = _us(lambda: BenchLater.perform_in(3600), count)
        redis.delete(key)
        now = _us(lambda: BenchLater.perform_async(), count)
        redis.delete(keys.queue("default"))
        rows.append({"what": "scheduled push (perform_in, wake-up included) vs an immediate one (perform_async)",
                     "plain_us": now, "us": single, "added_us": single - now})  # fmt: skip
    finally:
        for reader in readers:
            reader.kill()
            reader.wait()
        redis.delete(key)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.schedule_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("redis_url")
    parser.add_argument("--count", type=int, default=20_000, help="calls per timing")
    args = parser.parse_args(argv)
    kiq.default_config().redis_url = args.redis_url
    print(json.dumps({"rows": measure(args.redis_url, args.count)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
