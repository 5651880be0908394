"""What job groups cost (issue 44), on a private redis-server, from a real worker process (``-c 10``, basic fetch):

1. per job: a drain of ``--jobs`` no-op jobs ungrouped without the plugin (the baseline), ungrouped with it (every
   fetch then runs the groups' script), grouped into 1, 100 and 10,000 groups without a limit, and into 100 groups
   of limit 5 (a slot leased and released per job): Redis CPU (its main thread) and worker CPU (the process's
   threads) per job over the drain, and jobs/s;
2. a fetch that must not grow with idle or full groups: one group of ``--jobs`` jobs drained while 10,000 other
   groups hold jobs but are paused (left out of the rotation, as a group at its limit is).

Each drain: the worker started and idle, then the clock and the CPU counters read, the jobs pushed (a grouped push
runs a script: its Redis time is part of a grouped job's cost) and the counters read again once every job was
fetched and ran; ``--runs`` drains per case, the median shown.

    .venv/bin/python -m bench.groups_cost [--jobs 20000] [--runs 3] [--port 6391] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.cost import redis_cpu, tree_cpu
from bench.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
# case -> (groups, or None without the plugin; paused groups beside them; group_concurrency)
CASES = {
    "ungrouped, no plugin": (None, 0, 0),
    "ungrouped, plugin on": (0, 0, 0),
    "grouped, 1 group": (1, 0, 0),
    "grouped, 100 groups": (100, 0, 0),
    "grouped, 10,000 groups": (10_000, 0, 0),
    "1 group, 10,000 paused groups": (1, 10_000, 0),
    "grouped, 100 groups of limit 5": (100, 0, 5),
}


def push(url: str, jobs: int, groups: int | None) -> None:
    import kiq  # the kiq venv's (this module runs there); bench.all, in the bench venv, imports it for its tables

    config = kiq.Config(redis_url=url, plugins=[] if groups is None else ["groups"])
    client = kiq.Client(config)
    try:
        if not groups:
            client.push_bulk({"class": "BenchNoop", "args": [[n] for n in range(jobs)]}, batch_size=1000)
            return
        # round after round: each push_bulk of 1,000 fills up to 1,000 groups by one job each
        args = [[n] for n in range(jobs)]
        for start in range(0, jobs, 1000):
            for g in range(groups) if groups <= 1000 else range(start % groups, min(groups, start % groups + 1000)):
                chunk = [arg for arg in args[start : start + 1000] if arg[0] % groups == g]
                if chunk:
                    client.push_bulk({"class": "BenchNoop", "group": f"g{g}", "args": chunk}, batch_size=1000)
    finally:
        config.redis.close()


def pause_groups(url: str, idle: int) -> None:
    """``idle`` groups holding a job each, paused: out of the rotation, as a group at its limit is."""
    import kiq

    config = kiq.Config(redis_url=url, plugins=["groups"])
    try:
        for g in range(idle):
            kiq.Queue("default", config).group(f"idle{g}").pause()
            kiq.Client(config).push({"class": "BenchNoop", "group": f"idle{g}", "args": [0]})
    finally:
        config.redis.close()


def drain(server: RedisServer, jobs: int, groups: int | None, idle: int, limit: int = 0) -> dict[str, float]:
    """The jobs pushed while the queue is paused (Redis CPU per job of the push), the worker started and idle, the
    queue unpaused; the clock runs from the first job fetched to the last, the CPU counters from the unpause to
    the end of the last job."""
    import kiq.ext

    r = server.client()
    r.flushall()
    pause_groups(server.url, idle)
    r.sadd("kiq:paused", "default")
    before_push = redis_cpu(r.info("cpu"))
    push(server.url, jobs, groups)
    push_us = (redis_cpu(r.info("cpu")) - before_push) / jobs * 1e6
    env = {**os.environ, "KIQ_REDIS_URL": server.url, "KIQ_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
    if groups is not None:
        env["KIQ_PLUGINS"] = "groups"
        env["KIQ_GROUP_CONCURRENCY"] = str(limit)
    worker = subprocess.Popen(
        [sys.executable, "-m", "kiq.cli", "worker", "-r", "bench.systems.kiq_jobs", "-c", "10"], env=env, cwd=ROOT
    )
    base = kiq.ext.Keyspace().queue_scoped("kiq:groups:", "default")
    first = "queue:default" if not groups else base + "j:g0"  # the list the first fetch takes from
    try:
        deadline = time.monotonic() + 60
        while not r.scard("processes") and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # its threads up and blocked on the paused queue
        size = r.llen(first)
        counters = (redis_cpu(r.info("cpu")), tree_cpu(worker.pid))
        r.srem("kiq:paused", "default")
        while r.llen(first) == size and worker.poll() is None:
            time.sleep(0.001)
        started = time.perf_counter()
        while (r.llen("queue:default") or r.scard(base + "m")) and worker.poll() is None:
            time.sleep(0.002)
        drained = time.perf_counter()
        time.sleep(0.2)  # the last jobs fetched run (no-ops)
        end = (redis_cpu(r.info("cpu")), tree_cpu(worker.pid))
    finally:
        worker.terminate()
        worker.wait(30)
    return {
        "jobs_per_s": jobs / (drained - started),
        "push_redis_us": push_us,
        "redis_us": (end[0] - counters[0]) / jobs * 1e6,
        "worker_us": (end[1] - counters[1]) / jobs * 1e6,
    }


def markdown(part: dict[str, Any]) -> str:
    """The part's table for ``make bench``'s report (bench/all.py)."""
    lines = [
        f"{part['jobs']:,} no-op jobs, one worker -c 10, basic fetch; median of {part['runs']} drains per case",
        "",
        "| case | jobs/s | push: Redis µs/job | drain: Redis µs/job | drain: worker µs/job |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in part["rows"]:
        lines.append(
            f"| {row['case']} | {row['jobs_per_s']:,.0f} | {row['push_redis_us']:.2f} | {row['redis_us']:.2f} | "
            f"{row['worker_us']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def costs(part: dict[str, Any]) -> list[list[str]]:
    """The features' cost rows: a grouped job (1 group) against an ungrouped one without the plugin."""
    rows = {row["case"]: row for row in part["rows"]}
    plain, grouped = rows.get("ungrouped, no plugin"), rows.get("grouped, 1 group")
    if plain is None or grouped is None:
        return []
    redis_added = grouped["push_redis_us"] + grouped["redis_us"] - plain["push_redis_us"] - plain["redis_us"]
    return [
        [
            "a grouped job (groups plugin)",
            f"+{redis_added:.1f} µs Redis, +{grouped['worker_us'] - plain['worker_us']:.1f} µs worker per job",
            "bench/groups_cost.py (push and drain, against an ungrouped job without the plugin)",
        ]
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.groups_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--port", type=int, default=6391)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--cases", type=lambda text: text.split(";"), help="only these cases, separated by ';'")
    args = parser.parse_args(argv)
    server = RedisServer(args.port)
    server.start()
    rows: list[dict[str, Any]] = []
    try:
        for name, (groups, idle, limit) in CASES.items():
            if args.cases and name not in args.cases:
                continue
            runs = [drain(server, args.jobs, groups, idle, limit) for _ in range(args.runs)]
            row = {"case": name, **{key: statistics.median(run[key] for run in runs) for key in runs[0]}}
            rows.append(row)
            print(f"{name:32} {row['jobs_per_s']:9,.0f} jobs/s  push: Redis {row['push_redis_us']:6.2f} µs/job  "
                  f"drain: Redis {row['redis_us']:6.2f} µs/job, worker {row['worker_us']:6.1f} µs/job",
                  flush=True)  # fmt: skip
    finally:
        server.stop()
    if args.json:
        args.json.write_text(json.dumps({"jobs": args.jobs, "runs": args.runs, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
