"""What the unique, expiry, limiter and profiling plugins add to a job, in microseconds, on a real Redis.

    .venv/bin/python bench/plugin_overhead.py [--jobs 5000] [--redis-url redis://127.0.0.1:6390/0] [--json FILE]

Without ``--redis-url`` it runs on the embedded Redis in a temporary directory (a unix socket). Each figure is the
median of ``--runs`` runs of ``--jobs`` jobs, against the same path without the plugin:

1. the push (``perform_async``): the unique lock is one more round trip (a Lua script); expiry adds a field; inside
   a batch's block (``with Batch(...)``, the block's open and close included) the job joins the batch; the OTel
   plugin with no SDK (``opentelemetry-api`` only) starts a no-op producer span;
2. the server chain around a no-op ``perform``: the unique release (one round trip), the expiry check, the
   limiter plugin's middleware when no limiter is used (a ``try`` block), and the profiling plugin's for a job pushed
   without a profile token (one look-up); and, on fewer jobs, a job pushed with one (profiled, its profile stored);
3. one use of each limiter inside ``perform`` (``with limiter:``): a round trip to enter, and one more to leave for
   the concurrent limiter.

A ``PING`` round trip is printed too: the plugins' costs are mostly round trips. The flushed database is the one
of the URL given: use a Redis of your own.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kiq
import kiq.ext
from kiq.config import set_default_config
from kiq.embedded import EmbeddedRedis
from kiq.plugins.batch import Batch
from kiq.plugins.limiter import bucket, concurrent, window


class Plain(kiq.Job):
    kiq_name = "BenchPlain"

    def perform(self, number: int) -> None:
        pass


class Unique(Plain):
    kiq_name = "BenchUnique"
    kiq_options = {"unique_for": 600}


class Expiring(Plain):
    kiq_name = "BenchExpiring"
    kiq_options = {"expires_in": 600}


def per_job(run: Callable[[int], None], jobs: int, runs: int, reset: Callable[[], None]) -> float:
    """Median seconds per job of ``run(jobs)`` over ``runs`` runs, ``reset`` before each."""
    times = []
    for _ in range(runs):
        reset()
        started = time.perf_counter()
        run(jobs)
        times.append((time.perf_counter() - started) / jobs)
    return statistics.median(times)


def pushing(job_class: type[kiq.Job]) -> Callable[[int], None]:
    def run(jobs: int) -> None:
        for number in range(jobs):
            job_class.perform_async(number)

    return run


def pushing_in_batch(job_class: type[kiq.Job]) -> Callable[[int], None]:
    def run(jobs: int) -> None:
        with Batch("bench"):
            for number in range(jobs):
                job_class.perform_async(number)

    return run


def performing(config: kiq.Config, job_class: type[kiq.Job]) -> Callable[[int], None]:
    """The server chain around a no-op perform, for the jobs the push left in the queue (as a worker gets them)."""

    def run(jobs: int) -> None:
        chain = config.server_middleware
        for raw in config.redis.lrange("queue:default", 0, jobs - 1):
            job = kiq.ext.loads(raw)
            instance = job_class()
            instance.jid, instance.job = job["jid"], job
            chain.invoke((instance, job, "default"), lambda: instance.perform(*job["args"]))  # noqa: B023

    return run


def using(make: Callable[[], Any]) -> Callable[[int], None]:
    def run(jobs: int) -> None:
        limiter = make()
        for _ in range(jobs):
            with limiter:
                pass

    return run


def profiled(config: kiq.Config, jobs: int, runs: int) -> float:
    """Seconds per job of the server chain around a no-op perform for jobs pushed with a profile token: the
    profiler started and stopped, the profile encoded and stored (a transaction)."""
    set_default_config(config)

    def reset() -> None:
        config.redis.flushdb()
        Plain.set(profile="bench").perform_bulk([[number] for number in range(jobs)])

    return per_job(performing(config, Plain), jobs, runs, reset)


def measure(url: str, jobs: int, runs: int) -> list[tuple[str, float, float]]:
    """(what, µs per job, µs more than without the plugin)."""
    configs = {name: kiq.Config(redis_url=url, plugins=plugins) for name, plugins in
               (("plain", []), ("unique", ["unique"]), ("expiry", ["expiry"]), ("limiter", ["limiter"]),
                ("batch", ["batch"]), ("otel", ["otel"]), ("profiling", ["profiling"]))}  # fmt: skip
    redis = configs["plain"].redis

    def flush() -> None:
        redis.flushdb()

    def in_config(name: str, run: Callable[[int], None], prepare: Callable[[int], None] | None = None) -> float:
        set_default_config(configs[name])

        def reset() -> None:
            flush()
            if prepare is not None:
                prepare(jobs)

        return per_job(run, jobs, runs, reset)

    def pings(count: int) -> None:
        for _ in range(count):
            redis.ping()

    ping = per_job(pings, jobs, runs, flush)
    push = in_config("plain", pushing(Plain))
    chain = in_config("plain", performing(configs["plain"], Plain), pushing(Plain))
    rows = [
        ("PING round trip (reference)", ping, 0.0),
        ("push, no plugin", push, 0.0),
        ("push, unique (takes the lock)", in_config("unique", pushing(Unique)), push),
        ("push, expiry (stamps expires_at)", in_config("expiry", pushing(Expiring)), push),
        ("push, in a batch's block (joins it)", in_config("batch", pushing_in_batch(Plain)), push),
        ("push, otel plugin, no SDK", in_config("otel", pushing(Plain)), push),
        ("server chain, no plugin", chain, 0.0),
        ("server chain, unique (releases the lock)",
         in_config("unique", performing(configs["unique"], Unique), pushing(Unique)), chain),
        ("server chain, expiry (checks the deadline)",
         in_config("expiry", performing(configs["expiry"], Expiring), pushing(Expiring)), chain),
        ("server chain, limiter plugin, no limiter used",
         in_config("limiter", performing(configs["limiter"], Plain), pushing(Plain)), chain),
        ("server chain, profiling plugin, a job without a profile token",
         in_config("profiling", performing(configs["profiling"], Plain), pushing(Plain)), chain),
        ("server chain, profiling plugin, a job with a token (profiled and stored)",
         profiled(configs["profiling"], max(10, jobs // 100), runs), chain),
        ("with concurrent(...): enter + leave", in_config("limiter", using(lambda: concurrent("b", 10**9))), 0.0),
        ("with window(...): enter", in_config("limiter", using(lambda: window("b", 10**9, 1.0))), 0.0),
        ("with bucket(...): enter", in_config("limiter", using(lambda: bucket("b", 10**9, 1.0))), 0.0),
    ]  # fmt: skip
    for config in configs.values():
        config.redis.close()
    return [(what, seconds * 1e6, (seconds - base) * 1e6 if base else 0.0) for what, seconds, base in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--redis-url", help="a Redis to flush and use (default: the embedded one, in a temp dir)")
    parser.add_argument("--json", type=Path, help="also write the rows here (bench/all.py reads them)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiq-bench-") as scratch:
        server = None if args.redis_url else EmbeddedRedis(scratch)
        url = args.redis_url if server is None else server.ensure_running()
        try:
            rows = measure(url, args.jobs, args.runs)
        finally:
            if server is not None:
                server.stop()
    print(f"Redis: {url}; {args.jobs} jobs, median of {args.runs} runs\n")
    print("| what | µs per job | added by the plugin (µs) |")
    print("| --- | ---: | ---: |")
    for what, micros, added in rows:
        print(f"| {what} | {micros:.1f} | {f'{added:+.1f}' if added else ''} |")
    if args.json:
        rows_json = [{"what": what, "us_per_job": micros, "added_us": added} for what, micros, added in rows]
        settings = {"redis_url": url, "jobs": args.jobs, "runs": args.runs}
        args.json.write_text(json.dumps({"settings": settings, "rows": rows_json}, indent=2) + "\n")


if __name__ == "__main__":
    main()
