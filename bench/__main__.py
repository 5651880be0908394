"""``python -m bench``: run the benchmark (docs/bench.md), or re-render a saved run with ``--report FILE``.
``--io``: the I/O-bound drain instead (async jobs that each await 50 ms; kiq async, arq, taskiq, Dramatiq).
``--processes``: kiq ``-p 1``/``-p 2`` beside one and two Ruby Sidekiq processes, no-op and CPU-bound drains
(bench/processes.py, which takes its own options).
Unless ``--no-pin``, the run's redis-server runs on the last CPU and every pusher on the others (bench/machine.py,
pinning: a push's round trip costs ~1.7x more across cores than within one, and the scheduler picks either).
``--all``: everything above and the features' costs, with the issue's targets, in one report (bench/all.py, which
takes its own options; ``make bench``)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from bench import machine, report
from bench.redis_server import RedisServer
from bench.runner import Runner, Settings
from bench.systems import BY_NAME, IO_BY_NAME, Toolchain

ROOT = Path(__file__).resolve().parent.parent
TRACKING_URL = "postgresql+psycopg://kiq:kiq@127.0.0.1:5433/kiq"
# what a run's JSON keeps of its settings, per kind of drain
SETTINGS_SAVED = {
    "noop": (
        "jobs",
        "single_jobs",
        "single_runs",
        "latency_jobs",
        "latency_rate",
        "load_rate",
        "load_seconds",
        "drain_runs",
    ),
    "io": ("jobs", "drain_runs", "io_concurrency", "io_seconds"),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--jobs", type=int, help="jobs per drain (default 100,000; with --io 20,000)")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 10,000 jobs, 2,000 single pushes, 2 s of load"
    )
    parser.add_argument(
        "--io", action="store_true", help="the I/O-bound drain: async jobs that each await --io-seconds, no latency"
    )
    parser.add_argument("--io-concurrency", type=int, default=1000, help="jobs every system awaits at once (--io)")
    parser.add_argument("--io-seconds", type=float, default=0.05, help="what each job awaits (--io; default 0.05)")
    parser.add_argument("--single-jobs", type=int, help="jobs pushed one by one (default: min(jobs, 10,000))")
    parser.add_argument("--single-runs", type=int, default=3, help="single pushes per system, median reported")
    parser.add_argument("--latency-jobs", type=int, default=200)
    parser.add_argument("--latency-rate", type=float, default=100.0, help="latency jobs pushed per second")
    parser.add_argument(
        "--load-rate",
        type=float,
        default=5000.0,
        help="latency under load: jobs pushed per second, steadily, by one pusher (default 5,000; 0: no such phase)",
    )
    parser.add_argument("--load-seconds", type=float, help="how long the load lasts (default 5; --quick 2)")
    parser.add_argument("--systems", help="comma-separated names (default: all of the drain's kind)")
    parser.add_argument("--port", type=int, default=6391, help="port of the run's private redis-server")
    parser.add_argument("--max-drain-seconds", type=float, default=300.0, help="a slower drain is cut here")
    parser.add_argument(
        "--stop-timeout", type=float, default=30.0, help="seconds a worker gets to stop once measured, then SIGKILL"
    )
    parser.add_argument(
        "--drain-runs",
        type=int,
        help="bulk pushes + drains per system, medians reported (default 3, slow: once; --io 1)",
    )
    parser.add_argument("--kiq-python", default=str(ROOT / ".venv/bin/python"))
    parser.add_argument("--peer-python", default=str(ROOT / ".venv-bench/bin/python"))
    parser.add_argument("--tracking-url", default=os.environ.get("BENCH_TRACKING_DATABASE_URL", TRACKING_URL))
    parser.add_argument("--tracking-schema", default="kiq_bench", help="schema the run resets and uses")
    parser.add_argument("--no-yjit", action="store_true", help="run Ruby Sidekiq without YJIT")
    parser.add_argument(
        "--no-pin",
        action="store_true",
        help="let redis-server and the pushers run on any CPU (default: redis-server on the last one, pushers on the "
        "others, so a push's round trip always crosses cores)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results")
    parser.add_argument("--stem", help="the saved files' name (default: bench[-io]-DATE-TIME)")
    parser.add_argument("--report", type=Path, metavar="FILE.json", help="re-render a saved run; run nothing")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs = 10_000
        args.single_jobs = args.single_jobs or 2_000
    args.jobs = args.jobs or (20_000 if args.io else 100_000)
    args.load_seconds = args.load_seconds or (2.0 if args.quick else 5.0)
    args.drain_runs = args.drain_runs or (1 if args.io else 3)
    args.single_jobs = args.single_jobs or min(args.jobs, 10_000)
    known = IO_BY_NAME if args.io else BY_NAME
    args.systems = args.systems or ",".join(known)
    unknown = [name for name in args.systems.split(",") if name not in known]
    if unknown:
        parser.error(f"unknown systems {unknown}; known{' with --io' if args.io else ''}: {', '.join(known)}")
    return args


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if "--processes" in given:
        from bench import processes

        return processes.main(argv)
    if "--all" in given:
        from bench import all as everything

        return everything.main([arg for arg in given if arg != "--all"])
    args = parse_args(argv)
    if args.report:
        run = json.loads(args.report.read_text())
        print(report.markdown(run))
        report.save(run, args.report.parent, args.report.stem)
        return 0
    redis_cpus, pusher_cpus = machine.pinning(args.no_pin)
    server = RedisServer(args.port, cpus=redis_cpus)
    server.start()
    try:
        yjit = not args.no_yjit and machine.yjit_available()
        tools = Toolchain(
            ROOT, server.url, args.kiq_python, args.peer_python, args.tracking_url, args.tracking_schema, yjit,
            io_concurrency=args.io_concurrency, pusher_cpus=pusher_cpus,
        )  # fmt: skip
        stem = args.stem or time.strftime("bench-io-%Y%m%d-%H%M%S" if args.io else "bench-%Y%m%d-%H%M%S")
        run = {
            "command": shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": machine.describe(args.kiq_python, args.peer_python, server.version(), yjit),
            "kind": "io" if args.io else "noop",
            "settings": {k: args.__dict__[k] for k in SETTINGS_SAVED["io" if args.io else "noop"]},
            "results": [],
        }
        run["machine"]["CPU pinning"] = machine.pinning_text(redis_cpus, pusher_cpus)
        settings = Settings(
            args.jobs, args.single_jobs, args.latency_jobs, args.latency_rate, args.max_drain_seconds,
            logs=args.out / "logs", drain_runs=max(1, args.drain_runs), io=args.io, io_seconds=args.io_seconds,
            load_rate=0.0 if args.io else args.load_rate, load_seconds=args.load_seconds,
            single_runs=args.single_runs, stop_timeout=args.stop_timeout,
        )  # fmt: skip
        runner = Runner(tools, settings)
        known = IO_BY_NAME if args.io else BY_NAME
        for name in args.systems.split(","):
            print(f"== {name}", flush=True)
            result = runner.run(known[name])
            run["results"].append(result.to_json())
            print(f"   {result.error or _summary(result.to_json(), settings.load_rate)}", flush=True)
        run["machine"]["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    finally:
        server.stop()
    print()
    print(report.markdown(run))
    report.save(run, args.out, stem)
    return 0


def _summary(result: dict[str, object], load_rate: float) -> str:
    metrics = report.IO_METRICS if result.get("in_flight") else report.METRICS
    parts = [
        f"{report.header_for(header, load_rate)} {result[key]:,.1f} {unit}"
        for key, header, unit, _ in metrics
        if result[key]
    ]
    if result.get("load_rate_achieved"):
        parts.append(f"load pushed at {result['load_rate_achieved']:,.0f} jobs/s")
    return "; ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
