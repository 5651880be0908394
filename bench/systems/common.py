"""What every Python system's job module shares: the pusher command line and the latency record.

Stdlib only, so it runs in both interpreters (kiq's .venv and the peers' .venv-bench). A job module defines
``pusher() -> Pusher``; the harness runs ``python -m bench.systems.common MODULE MODE COUNT [--rate R]`` and
reads one JSON line from stdout. The module is imported under its real name (never run as ``__main__``), so
the jobs it pushes carry the names the worker registered.
Modes: ``single`` (COUNT no-op jobs, one push call each), ``bulk`` (COUNT no-op jobs through the system's
bulk API), ``latency`` (COUNT latency jobs at ``--rate`` per second, each carrying ``time.time()`` of its push).
A pusher's ``block`` (kiq's batch system: ``with Batch(...)``) wraps the whole push, inside the timing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

LATENCY_KEY = "bench:latency"  # a latency job RPUSHes (perform start - push time) in seconds here


@dataclass
class Pusher:
    """One system's client calls; ``bulk`` gets the whole list of argument lists and batches as is idiomatic."""

    version: str
    single: Callable[[int], Any]
    bulk: Callable[[list[list[int]]], Any]
    latency: Callable[[float], Any]
    note: str = ""  # how "bulk" is done where the system has no bulk API
    block: Callable[[], AbstractContextManager[Any]] | None = None  # every push of a run inside one such block


def redis_url() -> str:
    return os.environ["BENCH_REDIS_URL"]


def pace(count: int, rate: float, push: Callable[[float], Any]) -> None:
    """Push ``count`` latency jobs at ``rate`` per second (a fixed schedule, so a slow push doesn't drift it). The
    first push comes before the schedule starts: it sets the client up (settings, connection), and a schedule
    started before it would begin with a catch-up burst, not a steady rate."""
    if count:
        push(time.time())
    start = time.perf_counter()
    for index in range(count - 1):
        delay = start + index / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        push(time.time())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="push jobs for the benchmark")
    parser.add_argument("module", help="a job module defining pusher(), e.g. bench.systems.huey_jobs")
    parser.add_argument("mode", choices=["single", "bulk", "latency"])
    parser.add_argument("count", type=int)
    parser.add_argument("--rate", type=float, default=100.0)
    args = parser.parse_args(argv)
    pusher: Pusher = importlib.import_module(args.module).pusher()
    bulk_args = [[index] for index in range(args.count)] if args.mode == "bulk" else []
    block = pusher.block() if pusher.block is not None else nullcontext()
    started = time.perf_counter()
    with block:
        if args.mode == "single":
            for index in range(args.count):
                pusher.single(index)
        elif args.mode == "bulk":
            pusher.bulk(bulk_args)
        else:
            pace(args.count, args.rate, pusher.latency)
    seconds = time.perf_counter() - started
    result = {"seconds": seconds, "count": args.count, "version": pusher.version, "note": pusher.note}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
