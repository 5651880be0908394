"""Where a job's microseconds go: the single push, step by step, and the drain, per process (docs/performance.md).

    .venv/bin/python -m bench.profile [--jobs 100000] [--pushes 20000] [--port 6392] [--json FILE]

Starts a private ``redis-server`` (as ``python -m bench`` does, on the last CPU, the pushes on the others unless
``--no-pin``), then (``make bench`` runs it as its ``profile`` part):

1. **The single push** (``perform_async`` in a loop, one thread): each step timed alone over ``--pushes`` calls —
   the job normalized, checked and encoded (``Client.encode``), the commands built, the write
   (``kiq.redis.run_pipeline``: one round trip), a bare ``PING`` through redis-py for scale — and the whole
   ``perform_async``, without and with the otel plugin (no SDK); then what keyword and typed arguments add per
   push, per job and to the single push (bench/arguments_cost.py); what an iterable job adds per item to a plain
   loop (bench/iteration_cost.py, ten items per ``--pushes``).
2. **The drain**, basic and reliable: ``--jobs`` no-op jobs pushed, one ``kiq worker -c 10`` started, the clock
   from the first job taken to the empty queue; per job: the worker's user and system CPU and its context switches
   (``/proc``), Redis's CPU (``INFO cpu``), and the reliable fetch script's time in Redis (``INFO commandstats``).
3. **The metrics port**: drains without and with ``--metrics-port`` in alternating pairs, scraped every second
   (bench/metrics_cost.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from bench import machine, metrics_cost
from bench.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv/bin/python")
TICK = os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="no-op jobs per drain")
    parser.add_argument("--pushes", type=int, default=20_000, help="calls per timed push step")
    parser.add_argument("--port", type=int, default=6392, help="the private redis-server's port")
    parser.add_argument("--metrics-pairs", type=int, default=4, help="pairs of drains without and with a metrics port")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--no-pin", action="store_true", help="redis-server and the pushes on any CPU (see -m bench)")
    args = parser.parse_args(argv)
    redis_cpus, push_cpus = machine.pinning(args.no_pin)
    server = RedisServer(args.port, cpus=redis_cpus)
    server.start()
    try:
        push = push_steps(server.url, args.pushes, push_cpus)
        figures = {
            "push": push,
            "arguments": cost_rows("bench.arguments_cost", [server.url, "--count", str(args.pushes)], push_cpus),
            "activejob": cost_rows("bench.activejob_cost", ["--count", str(args.pushes)], push_cpus),
            "iteration": cost_rows(
                "bench.iteration_cost", ["--redis-url", server.url, "--items", str(args.pushes * 10)], push_cpus
            ),
            "drain": {fetch: drain(server.url, fetch, args.jobs) for fetch in ("basic", "reliable")},
            "metrics_port": metrics_cost.measure(server.url, args.jobs, args.metrics_pairs),
        }
    finally:
        server.stop()
    print(markdown(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def push_steps(url: str, count: int, cpus: frozenset[int] | None = None) -> dict[str, float]:
    """µs per call of each step of a single push, in a child process per plugin set (the otel plugin registers a
    client middleware for its config only, but the default config is what ``perform_async`` uses)."""
    steps = {}
    for plugins in ("", "otel"):
        done = subprocess.run(
            [PYTHON, "-c", _PUSH_STEPS, url, str(count)],
            env={**os.environ, "KIQ_PLUGINS": plugins, "KIQ_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)},
            capture_output=True, text=True, check=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )  # fmt: skip
        measured = json.loads(done.stdout)
        if plugins:
            steps["perform_async with otel (no SDK)"] = measured["perform_async"]
        else:
            steps.update(measured)
    return steps


# run in a child: prints {step: µs per call} as JSON
_PUSH_STEPS = """
import json, sys, timeit
import kiq
from kiq.client import listed_queues, write_commands
from kiq.redis import run_pipeline
from bench.systems.kiq_jobs import BenchNoop

kiq.default_config().redis_url = sys.argv[1]
count = int(sys.argv[2])
config = kiq.default_config()
connection = config.redis
client = kiq.Client()
item = {"class": BenchNoop, "args": [1]}
encoded = client.encode(dict(item))
listed = listed_queues(connection.connection_pool)
commands = write_commands([encoded], config, listed)
steps = {
    "normalize, check, jid, encode": lambda: client.encode({"class": BenchNoop, "args": [1]}),
    "commands to send": lambda: write_commands([encoded], config, listed),
    "the write (one round trip)": lambda: run_pipeline(connection, commands),
    "PING through redis-py (for scale)": connection.ping,
    "perform_async": lambda: BenchNoop.perform_async(1),
}
out = {}
for name, step in steps.items():
    step()
    out[name] = min(timeit.repeat(step, number=count, repeat=5)) / count * 1e6
connection.delete("queue:default")
print(json.dumps(out))
"""


def cost_rows(module: str, args: list[str], cpus: frozenset[int] | None = None) -> list[dict[str, Any]]:
    """The rows a cost script prints (bench/arguments_cost.py: keyword and typed arguments per push, per job and in
    a single push; bench/activejob_cost.py: an ActiveJob envelope per job; bench/iteration_cost.py: an iterable
    job per item), run in a child process."""
    done = subprocess.run(
        [PYTHON, "-m", module, *args],
        env={**os.environ, "KIQ_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, check=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )  # fmt: skip
    rows: list[dict[str, Any]] = json.loads(done.stdout)["rows"]
    return rows


def drain(url: str, fetch: str, jobs: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url, decode_responses=True)
    client.flushall()
    env = {**os.environ, "KIQ_REDIS_URL": url, "KIQ_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
    command = [PYTHON, "-m", "bench.systems.common", "bench.systems.kiq_jobs", "bulk", str(jobs)]
    subprocess.run(command, env=env, check=True, capture_output=True)
    worker = subprocess.Popen(
        [PYTHON, "-m", "kiq.cli", "worker", "-r", "bench.systems.kiq_jobs", "-c", "10", "--fetch", fetch], env=env
    )
    try:
        while client.llen("queue:default") == jobs:
            if worker.poll() is not None:
                raise RuntimeError(f"the {fetch} worker exited with {worker.returncode}")
            time.sleep(0.001)
        client.config_resetstat()
        started, redis_cpu, process = time.perf_counter(), _redis_cpu(client), _process(worker.pid)
        while client.llen("queue:default"):
            time.sleep(0.002)
        seconds = time.perf_counter() - started
        redis_after, process_after = _redis_cpu(client), _process(worker.pid)
        script = client.info("commandstats").get("cmdstat_evalsha", {})
    finally:
        worker.terminate()
        worker.wait(30)
    per_job = {key: (process_after[key] - process[key]) / jobs for key in process}
    return {
        "jobs/s": jobs / seconds,
        "worker user µs": per_job["user"] * 1e6,
        "worker sys µs": per_job["sys"] * 1e6,
        "context switches": per_job["switches"],
        "Redis µs": (redis_after - redis_cpu) / jobs * 1e6,
        "fetch script µs per call": script.get("usec_per_call"),
        "jobs per fetch script": jobs / script["calls"] if script.get("calls") else None,
    }


def _redis_cpu(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def _process(pid: int) -> dict[str, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    switches = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        for line in status.read_text().splitlines():
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                switches += int(line.split()[1])
    return {"user": int(fields[11]) / TICK, "sys": int(fields[12]) / TICK, "switches": float(switches)}


def markdown(figures: dict[str, Any]) -> str:
    push = figures["push"]
    lines = ["| a single push, step by step | µs per call |", "| --- | --- |"]
    lines += [f"| {name} | {value:.1f} |" for name, value in push.items()]
    lines += ["", "| keyword and typed arguments | µs, plain | µs | added µs |", "| --- | --- | --- | --- |"]
    lines += [
        f"| {r['what']} | {r['plain_us']:.1f} | {r['us']:.1f} | {r['added_us']:+.1f} |" for r in figures["arguments"]
    ]
    iteration = figures.get("iteration", [])
    if iteration:
        lines += ["", "| iterable jobs, per item | µs, plain loop | µs | added µs |", "| --- | --- | --- | --- |"]
        lines += [f"| {r['what']} | {r['plain_us']:.2f} | {r['us']:.2f} | {r['added_us']:+.2f} |" for r in iteration]
    drains = figures["drain"]
    lines += ["", "| a no-op job, per job | " + " | ".join(drains) + " |", "| --- |" + " --- |" * len(drains)]
    for key in next(iter(drains.values())):
        cells = [_cell(drains[fetch][key]) for fetch in drains]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if value >= 1000 else f"{value:.2f}" if value < 10 else f"{value:.1f}"


if __name__ == "__main__":
    sys.exit(main())
