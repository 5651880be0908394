"""``python -m bench.cost``: what a job costs, in the two figures that size a fleet — Redis's CPU and the worker's
CPU per job — for Ruby Sidekiq, kiq basic and kiq reliable, and how far one Redis carries them (docs/performance.md,
"Sizing a fleet").

    .venv-bench/bin/python -m bench.cost [--jobs 100000] [--rounds 3] [--fleet 1,2,4] [--port 6394]

One private redis-server (on the last CPU unless ``--no-pin``). Per drain: FLUSHALL, ``--jobs`` no-op jobs pushed
with the system's bulk API and parked under another key, the worker started (kiq ``-p N``; N ``sidekiq`` processes
through bench/multi.py) and registered, the jobs released; then, over the drain window only (the jobs released
to the empty queue): redis-server's **main-thread CPU** (``INFO cpu``), every command's calls and time (``INFO
commandstats``), its socket reads (``INFO stats``, ~ one per round trip: a pipeline is one), and the **worker's
CPU** (its process tree's threads' run time, /proc). The harness's own queue polls are counted and taken out.

1. **Cost per job**: one process of each system, ``--rounds`` rounds, the systems taking turns (the order
   reversed every other round), medians. The ceiling of one primary is 1 ÷ Redis µs/job: the rate at which
   Redis's single main thread would be busy all the time, whatever the number of workers.
2. **Pushes in alternating pairs** with Sidekiq (bench/pushes.py, ``--push-rounds``).
3. **One Redis, many workers**: 1, 2 and 4 (``--fleet``) worker processes of each system on the one Redis
   (one round; the row of 1 is the cost table's): jobs/s, how busy Redis's main thread was, and the ceiling it
   projects.

Commands that a Lua script runs are counted by Redis on their own too (``INFO commandstats``), and their time is
also inside the script's: the top commands show both, the totals count a script once.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import machine, processes, procs, pushes
from bench.redis_server import RedisServer
from bench.report import print_and_save, render_table
from bench.runner import BenchError, Result, Runner, Settings
from bench.systems import System, Toolchain

ROOT = Path(__file__).resolve().parent.parent
NOOP_JOBS, SIDEKIQ_NOOP = processes.DRAINS["noop"]
SYSTEMS = ("sidekiq", "kiq_basic", "kiq_reliable")
NO_METRICS = "kiq_no_metrics"  # kiq basic without the dashboard's metrics: the cost table's pair for their cost
PREFETCH = "kiq_reliable_prefetch"  # kiq reliable with reliable_prefetch (PREFETCH_JOBS): what prefetch saves a drain
PREFETCH_JOBS = 40
BASELINE = "sidekiq"
HARNESS = {"llen", "info", "config|resetstat", "rename", "scard", "flushall"}  # the harness's own commands
TOP = 5  # commands shown per system
# the targets (performance round 3), as a share of Sidekiq's cost per job
REDIS_TARGETS = {"kiq_reliable": 0.2, "kiq_basic": 0.25}
WORKER_TARGETS = {"kiq_reliable": 0.3}


def system(name: str, count: int) -> System:
    if name == BASELINE:
        return processes._sidekiq(count, SIDEKIQ_NOOP)
    if name == NO_METRICS:
        basic = processes._kiq(count, NOOP_JOBS)
        env = {"KIQ_METRICS": "false"}
        return replace(basic, name=name, label=f"{basic.label}, metrics off", env=lambda t: {**basic.env(t), **env})
    if name == PREFETCH:
        reliable = processes._kiq(count, NOOP_JOBS, "reliable")
        env = {"KIQ_RELIABLE_PREFETCH": str(PREFETCH_JOBS)}
        label = f"{reliable.label}, reliable_prefetch {PREFETCH_JOBS}"
        return replace(reliable, name=name, label=label, env=lambda t: {**reliable.env(t), **env})
    return processes._kiq(count, NOOP_JOBS, name.removeprefix("kiq_"))


class CountingRunner(Runner):
    """Counts its queue polls, so that the drain's figures leave them out: their number, and Redis's CPU for
    each (``poll_cpu``, measured once on the idle server)."""

    polls = 0
    poll_cpu = 0.0

    def queue_length(self, system: System) -> int:
        self.polls += 1
        return super().queue_length(system)

    def calibrate(self, polls: int = 2000) -> float:
        """Redis main-thread CPU seconds per queue poll, from ``polls`` of them on an idle server."""
        before = redis_cpu(self.redis.info("cpu"))
        for _ in range(polls):
            self.redis.llen(processes.STAGED)
        self.poll_cpu = max(0.0, redis_cpu(self.redis.info("cpu")) - before) / polls
        return self.poll_cpu


def redis_cpu(info: dict[str, Any]) -> float:
    """redis-server's main-thread CPU seconds so far (``INFO cpu``)."""
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


def tree_cpu(root: int) -> float:
    """CPU seconds of ``root``'s process tree: each thread's run time in nanoseconds from ``/proc/PID/task/TID/
    schedstat`` (the tick-counted ``/proc/PID/stat`` moves in 10 ms steps: ±8 % of a 10,000-job drain), or the
    ticks where the kernel has no schedstat. The threads live through a drain, so none of its time leaves with one."""
    total, found = 0, False
    for pid in procs.tree(root):
        for task in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            try:
                total += int(task.read_text().split()[0])
                found = True
            except (OSError, ValueError, IndexError):
                continue  # a thread that ended meanwhile
    return total / 1e9 if found else procs.cpu_seconds(root)


def command_stats(info: dict[str, Any]) -> dict[str, tuple[int, float]]:
    """Command -> (calls, µs) so far, from ``INFO everything`` (its commandstats section)."""
    return {
        key.removeprefix("cmdstat_"): (int(value["calls"]), float(value["usec"]))
        for key, value in info.items()
        if key.startswith("cmdstat_")
    }


def snapshot(runner: CountingRunner, worker_pid: int) -> dict[str, Any]:
    info = runner.redis.info("everything")
    return {
        "redis_cpu": redis_cpu(info),
        "reads": int(info["total_reads_processed"]),
        "commands": command_stats(info),
        "polls": runner.polls,
        "worker_cpu": tree_cpu(worker_pid),
        "at": time.perf_counter(),
    }


def drain(runner: CountingRunner, name: str, count: int) -> dict[str, Any]:
    """One drain of ``count`` processes of system ``name``: its figures per job over the drain window."""
    setup = system(name, count)
    jobs = runner.settings.jobs
    runner._reset(setup)
    bulk = runner.push(setup, "bulk", jobs)
    if runner.queue_length(setup) != jobs:
        raise BenchError(f"after the bulk push {setup.queue_key} does not hold {jobs} jobs")
    log_path = runner.settings.logs / f"cost-{setup.name}.log"
    runner.redis.rename(setup.queue_key, processes.STAGED)  # released once every process is up
    worker = runner.start_worker(setup, log_path)
    result = Result(setup.name, setup.label, setup.concurrency, jobs=jobs)
    try:
        processes._wait_processes(runner, worker, count, log_path)
        # the window opens as the jobs are released to the idle, registered workers (a fleet drains too fast for
        # the first poll that sees a job taken to start the clock)
        before = snapshot(runner, worker.pid)
        started = time.perf_counter()
        runner.redis.rename(processes.STAGED, setup.queue_key)
        runner._clock_drain(setup, worker, result, log_path, started)
        after = snapshot(runner, worker.pid)
        runner.check_failures(setup, log_path)
    finally:
        runner.stop(worker)
    return per_job(name, count, str(bulk["version"]), result, before, after, runner.poll_cpu)


def per_job(
    name: str, count: int, version: str, result: Result, before: dict[str, Any], after: dict[str, Any], poll_cpu: float
) -> dict[str, Any]:
    drained, seconds = result.drained, after["at"] - before["at"]
    polls = after["polls"] - before["polls"] + 3  # and the two snapshots' INFO, the RENAME
    commands: dict[str, dict[str, float]] = {}
    for command, (calls, usec) in after["commands"].items():
        calls_before, usec_before = before["commands"].get(command, (0, 0.0))
        if command in HARNESS or calls == calls_before:
            continue
        commands[command] = {"calls": (calls - calls_before) / drained, "us": (usec - usec_before) / drained}
    redis_cpu = max(0.0, after["redis_cpu"] - before["redis_cpu"] - polls * poll_cpu)
    redis_us = redis_cpu / drained * 1e6
    return {
        "system": name,
        "processes": count,
        "label": result.label,
        "version": version,
        "jobs": drained,
        "jobs/s": result.drain_rate,
        "redis_us": redis_us,
        "redis_busy": redis_cpu / seconds,
        "worker_us": (after["worker_cpu"] - before["worker_cpu"]) / drained * 1e6,
        "reads": (after["reads"] - before["reads"] - polls) / drained,
        "commands": commands,
        "ceiling": 1e6 / redis_us if redis_us > 0 else None,
    }


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every figure over a system's drains (commands: of each command's calls and time)."""
    out = dict(rows[0])
    for key in ("jobs/s", "redis_us", "redis_busy", "worker_us", "reads"):
        out[key] = statistics.median(row[key] for row in rows)
    out["ceiling"] = 1e6 / out["redis_us"] if out["redis_us"] > 0 else None
    names = {command for row in rows for command in row["commands"]}
    out["commands"] = {
        command: {
            field: statistics.median(row["commands"].get(command, {}).get(field, 0.0) for row in rows)
            for field in ("calls", "us")
        }
        for command in names
    }
    out["drains"] = len(rows)
    out["rates"] = [row["jobs/s"] for row in rows]
    return out


def run_rounds(runner: CountingRunner, rounds: int, counts: list[int], names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every system at every process count, ``rounds`` times, taking turns; the medians, in order."""
    drains: dict[tuple[str, int], list[dict[str, Any]]] = {}
    errors: dict[tuple[str, int], str] = {}
    plan = [(name, count) for count in counts for name in names]
    for round_ in range(rounds):
        for name, count in plan if round_ % 2 == 0 else plan[::-1]:
            if (name, count) in errors:
                continue
            try:
                row = drain(runner, name, count)
            except BenchError as exc:
                errors[name, count] = str(exc)
                print(f"   {name} x{count}: {exc}", flush=True)
                continue
            finally:
                runner.redis.flushall()
            drains.setdefault((name, count), []).append(row)
            print(
                f"   {row['label']}: {row['jobs/s']:,.0f} jobs/s, Redis {row['redis_us']:.2f} µs/job, "
                f"worker {row['worker_us']:.1f} µs/job",
                flush=True,
            )
    out = []
    for key in plan:
        if key in drains:
            out.append(median_row(drains[key]))
        else:
            out.append({"system": key[0], "processes": key[1], "error": errors.get(key, "not run")})
    return out


# -- the report -------------------------------------------------------------------------------------------
def _ratio(row: dict[str, Any], base: dict[str, Any] | None, key: str) -> str:
    value = row[key]
    text = f"{value:.2f}" if value < 10 else f"{value:.1f}"
    return f"{text} ({value / base[key]:.2f}x)" if base and base.get(key) else text


def _top(row: dict[str, Any]) -> str:
    ranked = sorted(row["commands"].items(), key=lambda item: -item[1]["us"])
    ranked = [(name, c) for name, c in ranked if c["calls"] >= 0.005][:TOP]  # not the heartbeat's rare writes
    return "; ".join(f"{name.upper()} {c['calls']:.2f} ({c['us']:.2f} µs)" for name, c in ranked)


def cost_table(rows: list[dict[str, Any]]) -> str:
    base = next((r for r in rows if r["system"] == BASELINE and not r.get("error")), None)
    headers = [
        "system", "version", "jobs/s", "Redis CPU µs/job (vs Sidekiq)", "worker CPU µs/job (vs Sidekiq)",
        "Redis reads/job (≈ round trips)", "top Redis commands: calls/job (µs/job)",
        "ceiling of one primary (1 ÷ Redis µs), jobs/s",
    ]  # fmt: skip
    table = [headers, ["---"] * len(headers)]
    notes = []
    for row in rows:
        if row.get("error"):
            table.append([row["system"], "error", *["-"] * (len(headers) - 2)])
            notes.append(f"{row['system']}: {row['error']}")
            continue
        table.append([
            row["label"], row["version"], f"{row['jobs/s']:,.0f}", _ratio(row, base, "redis_us"),
            _ratio(row, base, "worker_us"), f"{row['reads']:.2f}", _top(row),
            f"{row['ceiling']:,.0f}" if row["ceiling"] else "-",
        ])  # fmt: skip
        if row["drains"] > 1:
            notes.append(
                f"{row['label']}: median of {row['drains']} drains ({min(row['rates']):,.0f} to "
                f"{max(row['rates']):,.0f} jobs/s)"
            )
    notes.append(
        "commands a Lua script runs are counted on their own too, and their time is inside the script's "
        "(EVALSHA); Redis CPU is the main thread's over the drain window, which also pays for reading and "
        "writing the sockets"
    )
    return render_table(table, notes)


def fleet_table(rows: list[dict[str, Any]]) -> str:
    headers = ["system", "worker processes", "jobs/s", "Redis main thread busy", "Redis CPU µs/job",
               "projected ceiling of one primary, jobs/s"]  # fmt: skip
    table = [headers, ["---"] * len(headers)]
    for row in rows:
        if row.get("error"):
            table.append([row["system"], str(row["processes"]), "error", "-", "-", "-"])
            continue
        table.append([
            row["label"], str(row["processes"]), f"{row['jobs/s']:,.0f}", f"{row['redis_busy']:.0%}",
            f"{row['redis_us']:.2f}", f"{row['ceiling']:,.0f}" if row["ceiling"] else "-",
        ])  # fmt: skip
    return render_table(table, [])


def targets(rows: list[dict[str, Any]]) -> list[list[str]]:
    """(target, measured, met) rows of the issue's cost targets, from the cost table's rows."""
    by_name = {row["system"]: row for row in rows if not row.get("error")}
    base = by_name.get(BASELINE)
    out = []
    for key, what, limits in (("redis_us", "Redis CPU", REDIS_TARGETS), ("worker_us", "worker CPU", WORKER_TARGETS)):
        for name, limit in limits.items():
            row = by_name.get(name)
            target = f"{what} per job, {name.removeprefix('kiq_')} ≤ {limit:g}x Sidekiq"
            if not row or not base:
                out.append([target, "-", "not measured"])
                continue
            ratio = row[key] / base[key]
            measured = f"{row[key]:.2f} / {base[key]:.2f} µs = **{ratio:.2f}x**"
            out.append([target, measured, "met" if ratio <= limit else "**not met**"])
    return out


def metrics_share(rows: list[dict[str, Any]]) -> tuple[float, float, float] | None:
    """(kiq basic's worker CPU µs/job, the same without the dashboard's metrics, the share they cost), or None."""
    by_name = {row["system"]: row for row in rows if not row.get("error")}
    on, off = by_name.get("kiq_basic"), by_name.get(NO_METRICS)
    if not on or not off:
        return None
    return on["worker_us"], off["worker_us"], (on["worker_us"] - off["worker_us"]) / on["worker_us"]


def markdown(run: dict[str, Any]) -> str:
    settings = run["settings"]
    lines = [
        f"Cost per job: {settings['jobs']:,} no-op jobs per drain, one worker process (-c 10), "
        f"{'median of ' + str(settings['rounds']) + ' alternating drains' if settings['rounds'] > 1 else 'one drain'}"
        f" per system; the harness's queue polls ({settings['poll_us']:.1f} µs of Redis CPU each, measured on the "
        "idle server) taken out.",
        "",
        cost_table(run["cost"]),
    ]
    if run.get("fleet"):
        lines += [
            f"One Redis, many workers: {settings['jobs']:,} no-op jobs per drain, each worker process -c 10 "
            "(kiq -p N; N Sidekiq processes), one drain each (one process: the cost table's row). On a machine with "
            "fewer cores than processes the workers share them, so jobs/s stops growing; Redis µs/job and the "
            "ceiling are what carries over.",
            "",
            fleet_table(run["fleet"]),
        ]
    if run.get("pushes"):
        lines.append(pushes.table(run["pushes"]))
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="no-op jobs per drain of the cost table")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the cost table; medians")
    parser.add_argument("--fleet", default="1,2,4", help="worker processes on one Redis ('' to skip)")
    parser.add_argument("--push-rounds", type=int, default=5, help="alternating push pairs with Sidekiq (0: none)")
    parser.add_argument("--port", type=int, default=6394, help="the private redis-server's port")
    parser.add_argument("--kiq-python", default=str(ROOT / ".venv/bin/python"))
    parser.add_argument("--no-yjit", action="store_true", help="run Ruby Sidekiq without YJIT")
    parser.add_argument("--no-pin", action="store_true", help="redis-server on any CPU (see -m bench)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--report", type=Path, metavar="FILE.json", help="re-render a saved run; run nothing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        print(markdown(json.loads(args.report.read_text())))
        return 0
    redis_cpus, pusher_cpus = machine.pinning(args.no_pin)
    server = RedisServer(args.port, cpus=redis_cpus)
    server.start()
    try:
        yjit = not args.no_yjit and machine.yjit_available()
        tools = Toolchain(ROOT, server.url, args.kiq_python, args.kiq_python, "", "", yjit, pusher_cpus=pusher_cpus)
        run: dict[str, Any] = {
            "command": shlex.join(["python", "-m", "bench.cost", *(sys.argv[1:] if argv is None else argv)]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": machine.describe(args.kiq_python, args.kiq_python, server.version(), yjit),
            "settings": {"jobs": args.jobs, "rounds": args.rounds},
        }
        run["machine"].pop("python (peers)", None)
        run["machine"]["CPU pinning"] = machine.pinning_text(redis_cpus, pusher_cpus)
        logs = args.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        print(f"== cost per job, {args.jobs:,} jobs, {args.rounds} round(s)", flush=True)
        runner = CountingRunner(tools, Settings(args.jobs, 0, 0, 100.0, 120.0, logs=logs))
        run["settings"]["poll_us"] = runner.calibrate() * 1e6
        run["cost"] = run_rounds(runner, max(1, args.rounds), [1], (*SYSTEMS, NO_METRICS, PREFETCH))
        counts = [int(n) for n in args.fleet.split(",") if n.strip()]
        if counts:
            print(f"== one Redis, {', '.join(map(str, counts))} worker processes", flush=True)
            more = run_rounds(runner, 1, [n for n in counts if n != 1], SYSTEMS)
            single = [row for row in run["cost"] if row["system"] in SYSTEMS] if 1 in counts else []
            run["fleet"] = single + more
        if args.push_rounds > 0:
            print(f"== pushes, {args.push_rounds} alternating pairs", flush=True)
            run["pushes"] = pushes.alternating(runner, args.push_rounds, 5000, 20_000)
        run["machine"]["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    finally:
        server.stop()
    print_and_save(run, markdown(run), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
