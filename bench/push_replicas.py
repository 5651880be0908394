"""What ``push_replicas`` costs a push: single pushes and bulk pushes to a master with one replica, without and with
the ``WAIT`` (both redis-servers private to the run, on loopback).

    .venv/bin/python -m bench.push_replicas [--jobs 5000] [--port 6395]
"""

from __future__ import annotations

import argparse
import time

import kiq
from bench.redis_server import RedisServer


class Noop(kiq.Job):
    kiq_name = "BenchReplicatedNoop"

    def perform(self, index: int) -> None: ...


def rate(config: kiq.Config, jobs: int, bulk: bool, runs: int = 3) -> float:
    """Pushes per second, the best of ``runs`` (the first run also warms the connection and the caches)."""
    best = 0.0
    for _ in range(runs):
        config.redis.flushdb()
        started = time.perf_counter()
        if bulk:
            Noop.set(config=config).perform_bulk([[n] for n in range(jobs)])
        else:
            for n in range(jobs):
                Noop.set(config=config).perform_async(n)
        best = max(best, jobs / (time.perf_counter() - started))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--port", type=int, default=6395, help="the master's port; the replica takes the next one")
    args = parser.parse_args()
    master, replica = RedisServer(args.port), RedisServer(args.port + 1)
    master.start()
    replica.start()
    try:
        replica.client().replicaof("127.0.0.1", args.port)
        while replica.client().info("replication").get("master_link_status") != "up":
            time.sleep(0.05)
        print("| push | push_replicas=0 (jobs/s) | push_replicas=1 (jobs/s) | cost |")
        print("| --- | ---: | ---: | ---: |")
        for bulk in (False, True):
            plain = rate(kiq.Config(redis_url=master.url), args.jobs, bulk)
            waited = rate(kiq.Config(redis_url=master.url, push_replicas=1), args.jobs, bulk)
            cost = (1 / waited - 1 / plain) * 1_000_000
            kind = "perform_bulk" if bulk else "perform_async"
            print(f"| {kind} | {plain:,.0f} | {waited:,.0f} | +{cost:.1f} µs per job |")
    finally:
        replica.stop()
        master.stop()


if __name__ == "__main__":
    main()
