"""What writing job metrics in Sidekiq 7's keys, Sidekiq 8's, or both costs (kiq.server.metrics, ``sidekiq_wire``).

    .venv/bin/python -m bench.metrics_keys [--quick] [--classes 20] [--jobs 5000] [--flushes 300] [--json FILE]

Starts a private ``redis-server`` and, for each key layout, runs ``--flushes`` heartbeat flushes of a recorder that
counted ``--jobs`` jobs of ``--classes`` classes since the last one (one failure in 50; times spread over the first
histogram buckets), ten seconds apart (the heartbeat's interval: six flushes share a minute's keys). Recording a
job costs the same in every layout (the recorder does not know the keys), so it is timed once; the layouts differ
only in the flush. Reported per layout: the flush's time in the worker (one MULTI/EXEC) and in Redis (``INFO
commandstats``), both also per job, Redis commands per flush, and the memory of the keys after the run.

Prints a table, and with ``--json`` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import time
from pathlib import Path
from typing import Any

import kiq
from bench.redis_server import RedisServer
from kiq.server.metrics import BOTH_KEYS, SIDEKIQ7_KEYS, SIDEKIQ8_KEYS, SIZE, KeyLayout, MetricsFlusher, Recorder

LAYOUTS: list[tuple[str, KeyLayout]] = [
    ("Sidekiq 7 keys only", SIDEKIQ7_KEYS),
    ("Sidekiq 8 keys only (sidekiq_wire = 8)", SIDEKIQ8_KEYS),
    ("both (sidekiq_wire = 7, the default)", BOTH_KEYS),
]
HEARTBEAT = 10.0  # seconds between two flushes of a worker
START = 1_739_522_580.0  # 2025-02-14 08:43:00 UTC: every run writes the same minutes


def recording_us(jobs: int) -> float:
    """Microseconds ``Recorder.succeeded`` takes per job (the same whatever the layout)."""
    recorder, payloads = Recorder(), [{"class": f"Job{index % 20}"} for index in range(jobs)]
    started = time.perf_counter()
    for payload in payloads:
        recorder.succeeded(payload, started)
    return (time.perf_counter() - started) / jobs * 1e6


def count(recorder: Recorder, classes: int, jobs: int) -> None:
    """Add ``jobs`` finished jobs to the recorder: one failure in 50, the successes in the first five buckets."""
    for index in range(classes):
        counts = recorder.counts.setdefault(f"Bench::Job{index}", [0] * SIZE)
        share = jobs // classes
        failed = share // 50
        counts[0] += failed
        counts[1] += (share - failed) * 0.012
        for bucket in range(5):
            counts[2 + bucket] += (share - failed) // 5


def measure(config: kiq.Config, layout: KeyLayout, classes: int, jobs: int, flushes: int) -> dict[str, Any]:
    client = config.redis
    client.flushall()
    client.config_resetstat()
    flusher, recorder = MetricsFlusher(config, layout), Recorder()
    seconds: list[float] = []
    for index in range(flushes):
        count(recorder, classes, jobs)
        started = time.perf_counter()
        flusher.flush([recorder], now=START + HEARTBEAT * index)
        seconds.append(time.perf_counter() - started)
    stats = client.info("commandstats")
    commands = sum(int(stat["calls"]) for stat in stats.values())
    redis_us = sum(float(stat["usec"]) for stat in stats.values())
    keys = list(client.scan_iter(count=1000))
    memory = sum(int(client.memory_usage(key) or 0) for key in keys)
    flush_us = statistics.median(seconds) * 1e6
    return {
        "flush_us": round(flush_us, 1),
        "flush_us_per_job": round(flush_us / jobs, 4),
        "redis_us_per_flush": round(redis_us / flushes, 1),
        "redis_us_per_job": round(redis_us / flushes / jobs, 4),
        "commands_per_flush": round(commands / flushes, 1),
        "keys": len(keys),
        "memory_kib": round(memory / 1024, 1),
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer flushes (about 10 s in all)")
    parser.add_argument("--classes", type=int, default=20, help="job classes each flush writes")
    parser.add_argument("--jobs", type=int, default=5000, help="jobs counted between two flushes")
    parser.add_argument("--flushes", type=int, default=300, help="flushes per layout")
    parser.add_argument("--port", type=int, default=0, help="port of the private redis-server (0: a free one)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    flushes = min(args.flushes, 60) if args.quick else args.flushes
    server = RedisServer(args.port or free_port())
    server.start()
    try:
        config = kiq.Config(redis_url=server.url)
        record_us = recording_us(200_000)
        rows = []
        for name, layout in LAYOUTS:
            row = {"layout": name, **measure(config, layout, args.classes, args.jobs, flushes)}
            rows.append(row)
        config.redis.close()
    finally:
        server.stop()
    print(f"redis {server.url}, {args.classes} classes, {args.jobs:,} jobs per flush, {flushes} flushes per layout;")
    print(f"recording a job (any layout): {record_us:.3f} µs\n")
    print("| layout | flush (worker) µs | µs per job | Redis µs per flush | Redis µs per job | commands per flush "
          "| keys | memory KiB |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['layout']} | {row['flush_us']:,.0f} | {row['flush_us_per_job']:.3f} | "
              f"{row['redis_us_per_flush']:,.0f} | {row['redis_us_per_job']:.4f} | {row['commands_per_flush']:.0f} "
              f"| {row['keys']} | {row['memory_kib']:,.1f} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"recording_us": record_us, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
