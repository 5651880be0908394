"""kiq's no-op jobs spread over several queues, on any Redis kiq connects to (a cluster too), for bench/cluster.py.

Run with kiq's interpreter, ``KIQ_REDIS_URL``/``KIQ_SLOTS`` and ``BENCH_QUEUES`` (comma-separated) in the
environment:

- as a job module of ``python -m bench.systems.common bench.systems.kiq_queues bulk N``: ``perform_bulk`` of the
  N no-op jobs (bench/systems/kiq_jobs.py's ``BenchNoop``, which the worker requires) dealt round-robin over the
  queues, one bulk push per queue;
- ``python -m bench.systems.kiq_queues``: prints (JSON) the keys the harness reads on that Redis, built by kiq's
  own keyspace: each queue's list, the process set and the failure sets.
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import version
from typing import Any

import kiq
import kiq.ext
from bench.systems.common import Pusher
from bench.systems.kiq_jobs import BenchLatency, BenchNoop


def queues() -> list[str]:
    names = [name for name in os.environ.get("BENCH_QUEUES", "default").split(",") if name]
    if not names:
        raise SystemExit("BENCH_QUEUES names no queue (comma-separated names, e.g. a,b,c)")
    return names


def bulk(args: list[list[int]]) -> None:
    names = queues()
    for index, name in enumerate(names):
        BenchNoop.set(queue=name).perform_bulk(args[index :: len(names)])


def pusher() -> Pusher:
    return Pusher(
        version=version("kiq"),
        single=BenchNoop.perform_async,
        bulk=bulk,
        latency=BenchLatency.perform_async,
        note=f"perform_bulk round-robin over the queues {', '.join(queues())}",
    )


def keys() -> dict[str, Any]:
    space = kiq.ext.keyspace(kiq.default_config().redis)
    return {
        "queues": {name: space.queue(name) for name in queues()},
        "processes": space.key("processes"),
        "failures": [space.key("retry"), space.key("dead")],
    }


if __name__ == "__main__":
    sys.stdout.write(json.dumps(keys()) + "\n")
