"""Where a job's microseconds go: the single push, step by step, and the drain, per process (docs/performance.md).

    .venv/bin/python -m bench.profile [--jobs 100000] [--pushes 20000] [--port 6392] [--json FILE]

Starts a private ``redis-server`` (as ``python -m bench`` does, on the last CPU, the pushes on the others unless
``--no-pin``), then (``make bench`` runs it as its ``profile`` part):

1. **The single push** (``perform_async`` in a loop, one thread): each step timed alone over ``--pushes`` calls —
   the job normalized, checked and encoded (``Client.encode``), the commands built, the write
   (``kiq.pipeline.run_pipeline``: one round trip), a bare ``PING`` through redis-py for scale — and the whole
   ``perform_async``, without and with the otel plugin (no SDK); then what keyword and typed arguments add per
   push, per job and to the single push (bench/arguments_cost.py); what an iterable job adds per item to a plain
   loop (bench/iteration_cost.py, ten items per ``--pushes``).
2. **The drain**, basic and reliable: ``--jobs`` no-op jobs pushed, one ``kiq worker -c 10`` started, the clock
   from the first job taken to the empty queue; per job: the worker's user and system CPU and its context switches
   (``/proc``), Redis's main-thread CPU (``INFO cpu``), and the reliable fetch script's time in Redis.
3. **Where the drain's time goes, step by step** (µs per job): in Redis, each command's time (``INFO
   commandstats``: the fetch script, the commands inside it, any other), the rest being the round trips' socket
   reads and writes and the event loop; in the worker, py-spy (the bench venv's, if installed) samples the threads
   that hold the GIL over the drain, and each sample goes to the step of its innermost known frame (``STEPS``):
   a step's share of the samples times the worker's CPU per job. Samples show Python's time; a system call made
   without the GIL (a socket's read) counts to its step only while the GIL is held.
4. **The metrics port**: drains without and with ``--metrics-port`` in alternating pairs, scraped every second
   (bench/metrics_cost.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
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
PY_SPY = ROOT / ".venv-bench/bin/py-spy"
TICK = os.sysconf("SC_CLK_TCK")
# the worker's steps, each by the frames (py-spy's "Class.method") that belong to it; a sample goes to the step of
# its innermost frame found here
STEPS: list[tuple[str, tuple[str, ...]]] = [
    ("fetch: the Redis round trip (command packed, sent, reply read)", ("DedicatedConnection.command",)),
    (
        "fetch: script arguments, reply and in-flight bookkeeping",
        (
            "ReliableFetch.pop",
            "ReliableFetch._move",
            "BasicFetch.pop",
            "InFlight.add",
            "ReliableUnit.__init__",
            "ReliableFetch.retrieve_work",
            "BasicFetch.retrieve_work",
        ),
    ),
    ("fetch: hand-off between threads (lead, wake, sleep)", ("BatchFetch.",)),
    ("job: payload parsed", ("JobRunner.parse",)),
    (
        "job: acknowledged",
        (
            "ReliableFetch.acknowledge",
            "ReliableUnit.acknowledge",
            "PendingAcks.",
            "InFlight.discard",
            "JobAcknowledgement.",
            "JobRunner._acknowledge",
        ),
    ),
    ("job: stats and dashboard metrics", ("Recorder.",)),
    ("job: logging context, middleware, retry wrapper, perform", ("JobRunner.", "Processor.process")),
    ("the rest (heartbeat, acknowledgement sender, the processor loop)", ()),  # whatever matched none above
]


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
            "encryption": cost_rows("bench.encryption_cost", ["--count", str(args.pushes)], push_cpus),
            "profiling": cost_rows("bench.profiling_cost", ["--count", str(args.pushes)], push_cpus),
            "iteration": cost_rows(
                "bench.iteration_cost", ["--redis-url", server.url, "--items", str(args.pushes * 10)], push_cpus
            ),
            "schedule": cost_rows("bench.schedule_cost", [server.url, "--count", str(args.pushes)], push_cpus),
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
import kiq.ext
from kiq.job_writes import listed_queues, write_commands
from kiq.pipeline import run_pipeline
from bench.systems.kiq_jobs import BenchNoop

kiq.default_config().redis_url = sys.argv[1]
count = int(sys.argv[2])
config = kiq.default_config()
connection = config.redis
client = kiq.Client()
item = {"class": BenchNoop, "args": [1]}
encoded = client.encode(dict(item))
listed = listed_queues(connection.connection_pool)
keys = kiq.ext.keyspace(connection)
commands = write_commands([encoded], config, listed, keys)
steps = {
    "normalize, check, jid, encode": lambda: client.encode({"class": BenchNoop, "args": [1]}),
    "commands to send": lambda: write_commands([encoded], config, listed, keys),
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
    a single push; bench/activejob_cost.py: an ActiveJob envelope per job; bench/encryption_cost.py: the encryption
    plugin per push and per job; bench/iteration_cost.py: an iterable job per item), run in a child process."""
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
    samples = Path(f"/tmp/kiq-profile-{os.getpid()}-{fetch}.txt")
    spy = None
    try:
        while client.llen("queue:default") == jobs:
            if worker.poll() is not None:
                raise RuntimeError(f"the {fetch} worker exited with {worker.returncode}")
            time.sleep(0.001)
        spy = _sample(worker.pid, samples)
        client.config_resetstat()
        started, redis_cpu, process = time.perf_counter(), _redis_cpu(client), _process(worker.pid)
        jobs = client.llen("queue:default")  # the ones left to drain now: the window's
        while client.llen("queue:default"):
            time.sleep(0.002)
        seconds = time.perf_counter() - started
        redis_after, process_after = _redis_cpu(client), _process(worker.pid)
        commands = {
            key.removeprefix("cmdstat_"): stats
            for key, stats in client.info("commandstats").items()
            if key not in ("cmdstat_llen", "cmdstat_info", "cmdstat_config|resetstat")
        }
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes what it sampled and exits
            spy.wait(30)
        worker.terminate()
        worker.wait(30)
    per_job = {key: (process_after[key] - process[key]) / jobs for key in process}
    script = commands.get("evalsha", {})
    redis_us = (redis_after - redis_cpu) / jobs * 1e6
    worker_us = (per_job["user"] + per_job["sys"]) * 1e6
    return {
        "jobs/s": jobs / seconds,
        "worker user µs": per_job["user"] * 1e6,
        "worker sys µs": per_job["sys"] * 1e6,
        "context switches": per_job["switches"],
        "Redis µs": redis_us,
        "fetch script µs per call": script.get("usec_per_call"),
        "jobs per fetch script": jobs / script["calls"] if script.get("calls") else None,
        "steps": {
            "redis": redis_steps(commands, redis_us, jobs),
            "worker": worker_steps(samples, worker_us) if spy is not None else {},
        },
    }


def _sample(pid: int, out: Path) -> subprocess.Popen[bytes] | None:
    """py-spy recording the GIL holder's stack of ``pid`` until SIGINT, or None without py-spy."""
    if not PY_SPY.exists():
        return None
    command = [str(PY_SPY), "record", "--pid", str(pid), "--gil", "--nonblocking", "--rate", "250"]
    spy = subprocess.Popen([*command, "--format", "raw", "--output", str(out)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(0.2)  # attached
    return spy


def redis_steps(commands: dict[str, dict[str, float]], redis_us: float, jobs: int) -> dict[str, float]:
    """Redis's µs per job by command (those a script runs under it, prefixed "in the script:"), and the rest: the
    round trips' socket reads and writes, and the event loop."""
    from kiq.plugins.reliable_fetch import scripts

    inside = {name.lower() for name in re.findall(r"redis\.call\('(\w+)'", scripts.FETCH.source)}
    inside = inside if "evalsha" in commands else set()
    steps = {}
    for name, stats in sorted(commands.items(), key=lambda item: -float(item[1]["usec"])):
        label = f"in the script: {name.upper()}" if name in inside else name.upper()
        steps[label] = float(stats["usec"]) / jobs
    counted = sum(value for label, value in steps.items() if not label.startswith("in the script"))
    steps["sockets, protocol and event loop (the rest)"] = max(0.0, redis_us - counted)
    return steps


def worker_steps(samples: Path, worker_us: float) -> dict[str, float]:
    """The worker's CPU µs per job by step (``STEPS``), from py-spy's raw samples (one stack and count a line)."""
    counts = dict.fromkeys((name for name, _ in STEPS), 0)
    try:
        lines = samples.read_text().splitlines()
    finally:
        samples.unlink(missing_ok=True)
    for line in lines:
        stack, _, count = line.rpartition(" ")
        frames = [frame.split(" (", 1)[0] for frame in stack.split(";")]
        counts[_step(frames)] += int(count)
    total = sum(counts.values())
    return {name: count / total * worker_us for name, count in counts.items()} if total else {}


def _step(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, prefixes in STEPS[:-1]:
            if frame.startswith(prefixes):
                return name
    return STEPS[-1][0]


def _redis_cpu(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])


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
        if key != "steps":
            cells = [_cell(drains[fetch][key]) for fetch in drains]
            lines.append(f"| {key} | " + " | ".join(cells) + " |")
    for side, what in (("redis", "Redis main-thread CPU"), ("worker", "worker CPU (py-spy, GIL holder)")):
        names = list(dict.fromkeys(name for fetch in drains for name in drains[fetch].get("steps", {}).get(side, {})))
        if not names:
            continue
        lines += ["", f"| where the {what} goes, µs per job | " + " | ".join(drains) + " |"]
        lines.append("| --- |" + " --- |" * len(drains))
        for name in names:
            cells = [_cell(drains[fetch].get("steps", {}).get(side, {}).get(name)) for fetch in drains]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if value >= 1000 else f"{value:.2f}" if value < 10 else f"{value:.1f}"


if __name__ == "__main__":
    sys.exit(main())
