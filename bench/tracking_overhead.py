"""What tracking costs a job thread, and how fast the background writer drains.

    .venv/bin/python bench/tracking_overhead.py [--jobs 20000] [--database-url sqlite:///...] [--json FILE]

1. Hot path: the server middleware chain around a no-op ``perform`` for N jobs of a task, with and without the
   tracking middleware (the job thread only merges updates into the writer's pending dict; no I/O).
2. Writer: how long the background thread takes to write those N jobs' updates (working + finished + one
   message each) to the database, in batches.
No Redis is needed: jobs are run through the chain directly.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import kiq
from kiq.payload import new_jid
from kiq.plugins.tracking import message, tracker_for


class Noop(kiq.Job):
    kiq_name = "BenchNoop"

    def perform(self, number: int) -> None:
        pass


class Noisy(kiq.Job):
    kiq_name = "BenchNoisy"

    def perform(self, number: int) -> None:
        message(self, "one progress message")


def run_chain(config: kiq.Config, job_class: type[kiq.Job], jobs: list[dict[str, Any]]) -> float:
    """Seconds per job for the server chain around ``perform``."""
    chain = config.server_middleware
    started = time.perf_counter()
    for job in jobs:
        instance = job_class()
        instance.jid, instance.job = job["jid"], job
        chain.invoke((instance, job, "default"), lambda: instance.perform(*job["args"]))  # noqa: B023
    return (time.perf_counter() - started) / len(jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--database-url", help="default: a fresh SQLite file")
    parser.add_argument("--json", type=Path, help="also write the figures here (bench/all.py reads them)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiq-bench-") as scratch:
        figures = measure(args.jobs, args.database_url or f"sqlite:///{scratch}/tracking.db")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


def measure(count: int, url: str) -> dict[str, Any]:
    jobs = [{"class": "BenchNoop", "args": [n], "jid": new_jid(), "task_id": "0" * 32} for n in range(count)]

    plain = kiq.Config(redis_url="redis://unused")
    base = run_chain(plain, Noop, jobs)

    config = kiq.Config(redis_url="redis://unused", plugins=["tracking"], tracking_database_url=url)
    kiq.config.set_default_config(config)
    tracker = tracker_for(config)
    tracker.store.init_schema()
    tracked = run_chain(config, Noop, jobs)
    writer_started = time.perf_counter()
    tracker.writer.flush(600)
    drained = time.perf_counter() - writer_started
    for job in jobs:
        job["jid"] = new_jid()
    noisy = run_chain(config, Noisy, jobs)
    tracker.writer.close(600)

    print(f"database: {url}  jobs: {count}")
    print(f"server chain, no tracking:        {base * 1e6:8.1f} µs/job")
    print(f"server chain, tracked:            {tracked * 1e6:8.1f} µs/job  (+{(tracked - base) * 1e6:.1f})")
    print(f"tracked + one message per job:    {noisy * 1e6:8.1f} µs/job")
    end_to_end = count / max(drained + tracked * count, 1e-9)
    print(f"writer drained the rest in {drained:.2f} s (after the jobs' own {tracked * count:.2f} s; "
          f"{end_to_end:,.0f} jobs/s end to end)")  # fmt: skip
    return {
        "database": url.split("://", 1)[0], "jobs": count, "chain_us": base * 1e6, "tracked_us": tracked * 1e6,
        "added_us": (tracked - base) * 1e6, "noisy_us": noisy * 1e6, "writer_seconds": drained,
        "end_to_end_rate": end_to_end,
    }  # fmt: skip


if __name__ == "__main__":
    main()
