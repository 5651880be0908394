"""What an iterable job costs per item, next to a plain loop in ``perform``: the same no-op item body, walked by
``kiq.IterableJob`` (the cursor kept per item, the flush clock read, its state saved every 5 s: the default
``iteration_flush_interval``) from ``kiq.iteration.items`` and from a bare generator of ``(item, cursor)`` pairs.
Issue 32's target: at most 2 µs an item.

    .venv-bench/bin/python -m bench.iteration_cost [--quick] [--items N] [--redis-url URL]

Without ``--redis-url`` it starts a private ``redis-server`` and measures in a child process run by kiq's own venv
(.venv), so any interpreter can start it; with one (bench/profile.py passes its server's) it measures here. Prints
``{"rows": [{"what", "plain_us", "us", "added_us"}, ...]}`` as JSON (µs per item), the shape of
bench/activejob_cost.py's rows. The jobs run in this process, on one thread: only the per-item work differs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KIQ_PYTHON = str(ROOT / ".venv/bin/python")
TARGET_US = 2.0


def measure(items: int, redis_url: str | None = None, repeat: int = 3) -> list[dict[str, Any]]:
    """µs per item of each walk, the best of ``repeat`` runs of ``items`` items (on the default config's Redis, or
    ``redis_url``'s)."""
    import kiq
    import kiq.ext
    from kiq.config import set_default_config

    if redis_url is not None:
        set_default_config(kiq.Config(redis_url=redis_url))

    class PlainLoop(kiq.Job, abstract=True):
        def perform(self, count: int) -> None:
            for item in range(count):
                self.each_item(item, count)

        def each_item(self, item: int, count: int) -> None:
            pass

    class ItemsWalk(kiq.IterableJob, abstract=True):
        def build_enumerator(self, count: int, *, cursor: int | None) -> Iterator[tuple[int, int]]:  # type: ignore[override]
            return kiq.iteration.items(range(count), cursor)

        def each_iteration(self, item: int, count: int) -> None:
            pass

    class GeneratorWalk(ItemsWalk, abstract=True):
        def build_enumerator(self, count: int, *, cursor: int | None) -> Iterator[tuple[int, int]]:  # type: ignore[override]
            return ((item, item) for item in range(cursor or 0, count))

    def per_item(job_class: type[kiq.Job]) -> float:
        best = float("inf")
        for _ in range(repeat):
            job = job_class()
            job.jid = kiq.ext.new_jid()
            job.job = {"class": "BenchIteration", "args": [items], "jid": job.jid, "queue": "default"}
            started = time.perf_counter()
            job.perform(items)
            best = min(best, time.perf_counter() - started)
        return best / items * 1e6

    plain = per_item(PlainLoop)
    rows = []
    for what, job_class in (
        ("iterable job: per item, kiq.iteration.items (5 s flush)", ItemsWalk),
        ("iterable job: per item, a generator of (item, cursor) (5 s flush)", GeneratorWalk),
    ):
        us = per_item(job_class)
        rows.append({"what": what, "plain_us": round(plain, 3), "us": round(us, 3), "added_us": round(us - plain, 3)})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.iteration_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200,000 items (default 1,000,000)")
    parser.add_argument("--items", type=int, help="items per walk")
    parser.add_argument("--redis-url", help="the Redis for the jobs' state (default: a private redis-server)")
    args = parser.parse_args(argv)
    items = args.items or (200_000 if args.quick else 1_000_000)
    if args.redis_url is not None:
        rows = measure(items, args.redis_url)
        for row in rows:
            verdict = "meets" if row["added_us"] <= TARGET_US else "misses"
            print(f"{row['what']}: +{row['added_us']:.2f} µs ({verdict} ≤ {TARGET_US} µs)", file=sys.stderr)
        print(json.dumps({"rows": rows}, indent=2))
        return
    from bench.redis_server import RedisServer  # the harness's, in any interpreter

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = RedisServer(port)
    server.start()
    try:
        command = [KIQ_PYTHON, "-m", "bench.iteration_cost", "--items", str(items), "--redis-url", server.url]
        env = {**os.environ, "KIQ_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
        subprocess.run(command, env=env, check=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
