"""``python -m bench.cluster``: kiq on a 3-primary Redis Cluster against one standalone redis-server, in one run on
one machine (issue 34): the drain, the Redis CPU per job, and how the commands spread over the primaries.

    .venv-bench/bin/python -m bench.cluster [--quick] [--jobs 50000] [--rounds 3] [--fetches basic,reliable]

Two private Redis: a standalone redis-server (``--port``) and a cluster of ``--primaries`` primaries without
replicas (``--cluster-port`` upward; bench/redis_cluster.py), every redis-server on the same CPU unless
``--no-pin`` (bench/machine.py), so both layouts have the same Redis CPU to spend. Three targets: the standalone
server, the cluster with ``slots = "one"`` and with ``slots = "queue"`` (``redis+cluster://`` URL,
docs/guide/redis.md). Per target, per fetch (``--fetches``), two drains: all jobs in one queue, and the jobs
dealt evenly over three queues whose slots fall on three different primaries (chosen from the cluster's slot map;
a real deployment sees the same: a queue's load lands on the primary that owns its slot); the worker fetches the
three at equal weights.

A drain as bench/cost.py's: FLUSHALL, ``--jobs`` no-op jobs pushed with ``perform_bulk`` and parked under another
key of the same slot, one ``kiq worker -c 10`` started and registered, the jobs released; over the drain window (the
release to the queues seen empty): jobs/s, every primary's main-thread CPU (``INFO cpu``, the harness's polls taken
out) and command calls (``INFO commandstats``, the harness's own commands left out), and the worker's CPU.
``--rounds`` rounds with the setups taking turns (reversed every other round); the drain with the median rate is
reported. A setup that fails (a fetch not yet cluster-correct) is reported "not measured" with its error.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from bench import cost, machine, processes
from bench.cluster_report import SPREAD_QUEUES, STANDALONE, markdown, one_line
from bench.redis_cluster import RedisCluster, owner
from bench.redis_server import RedisServer
from bench.report import print_and_save
from bench.runner import BenchError, Result, Settings
from bench.systems import CONCURRENCY, System, Toolchain

ROOT = Path(__file__).resolve().parent.parent
LAYOUTS = ("one", "queue")  # the cluster's slots settings
CANDIDATES = [*"abcdefghijklmnopqrstuvwxyz", *(f"q{n}" for n in range(1000))]  # queue names tried, in order
STAGED_SUFFIX = ":bench-staged"  # a parked queue's key: the queue's key + this, so in the queue's hash slot
FIRST_JOB_TIMEOUT = 20.0  # seconds from the release to the first job taken: longer is a fetch that fails
SNAPSHOT_POLLS = 3  # the harness's other calls in a window, counted as polls: two INFOs and the RENAME back
PAIRED = ("jobs/s", "redis_us", "worker_us")  # the figures compared round by round with the standalone drain's


@dataclass
class Target:
    """A Redis kiq runs on, with a plain client per primary (port -> client) and the harness's own client."""

    name: str
    url: str
    slots: str | None
    harness: Any  # a redis.Redis, or for a cluster a redis.RedisCluster: it routes the runner's calls alike
    primaries: dict[int, redis.Redis]
    owners: dict[tuple[int, int], int] = field(default_factory=dict)  # empty: a standalone server

    def port_of(self, key: str) -> int:
        if not self.owners:
            return next(iter(self.primaries))
        return owner(self.owners, key_slot(key.encode()))


@dataclass(frozen=True)
class Setup:
    target: str
    fetch: str
    queues: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.target}, {self.fetch}, {len(self.queues)} queue{'s' if len(self.queues) > 1 else ''}"


class ClusterRunner(cost.CountingRunner):
    """bench/cost.py's runner on a target: its queue length the sum over the setup's queues (a poll), each on the
    primary that holds it."""

    def __init__(self, tools: Toolchain, settings: Settings, target: Target) -> None:
        super().__init__(tools, settings)
        self.redis = target.harness
        self.target = target
        self.queue_keys: list[str] = []
        self.notes: list[str] = []

    def queue_length(self, system: System) -> int:
        self.polls += 1
        return sum(int(self.redis.llen(key)) for key in self.queue_keys)

    def check_failures(self, system: System, log: Path) -> None:
        """No failed job; what the worker logged is kept as the drain's notes, not a failure: on a cluster, core
        paths not yet cluster-correct (a heartbeat's failover check, its metrics) log errors while every job runs."""
        self.check_failed_jobs(system, log)
        self.notes = logged_errors(log)


def logged_errors(log: Path, limit: int = 5) -> list[str]:
    """The distinct WARNING/ERROR messages and exceptions in a worker's log (without timestamps), at most
    ``limit``; not the job registry's note that the bench's other jobs go to a queue this worker doesn't serve."""
    found: dict[str, None] = {}
    in_traceback = False
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("Traceback (most recent call last)"):
            in_traceback = True
            continue
        if in_traceback and line.startswith(" "):
            continue
        message = line if in_traceback else ""  # the exception that ends a traceback
        in_traceback = False
        for level in (" WARNING: ", " ERROR: "):
            if level in line and "which this worker does not serve" not in line:
                message = line.split(level, 1)[1]
        if message:
            found[message[:240]] = None
    return list(found)[:limit]


def spread_queues(owners: dict[tuple[int, int], int], count: int) -> tuple[str, ...]:
    """``count`` queue names whose lists (``queue:{name}`` in the queue layout: the name is the hash tag) fall on
    ``count`` different primaries: the first candidate for each primary in port order."""
    ports = sorted(set(owners.values()))[:count]
    if len(ports) < count:
        raise ValueError(f"{count} queues on different primaries need {count} primaries, the cluster has {len(ports)}")
    chosen: dict[int, str] = {}
    for name in CANDIDATES:
        port = owner(owners, key_slot(name.encode()))
        if port in ports and port not in chosen:
            chosen[port] = name
        if len(chosen) == count:
            return tuple(sorted(chosen.values()))
    raise ValueError(f"no {count} candidate queue names fall on {count} different primaries")


def system(tools: Toolchain, target: Target, setup: Setup, failures: tuple[str, ...] = ()) -> System:
    weights = [name if len(setup.queues) == 1 else f"{name},1" for name in setup.queues]  # several: equal weights

    def worker(t: Toolchain) -> list[str]:
        command = [t.kiq_python, "-m", "kiq.cli", "worker", "-r", "bench.systems.kiq_jobs", "-c", str(CONCURRENCY)]
        command += ["--redis-url", target.url, "--fetch", setup.fetch]
        return command + [word for weight in weights for word in ("-q", weight)]

    env = {"KIQ_REDIS_URL": target.url, "KIQ_LOG_LEVEL": "WARNING", "BENCH_QUEUES": ",".join(setup.queues)}
    env |= {"KIQ_SLOTS": target.slots} if target.slots else {}
    return System(
        name=setup.name,
        label=setup.name,
        worker=worker,
        pusher=lambda t: [t.kiq_python, "-m", "bench.systems.common", "bench.systems.kiq_queues"],
        queue_key="",  # the runner polls its queue_keys
        env=lambda t: env,
        failure_keys=failures,
    )


def snapshot(runner: ClusterRunner, worker_pid: int) -> dict[str, Any]:
    nodes = {}
    for port, client in runner.target.primaries.items():
        info = client.info("everything")
        nodes[port] = {"redis_cpu": cost.redis_cpu(info), "commands": cost.command_stats(info)}
    return {"nodes": nodes, "polls": runner.polls, "worker_cpu": cost.tree_cpu(worker_pid), "at": time.perf_counter()}


def drain(runner: ClusterRunner, setup: Setup) -> dict[str, Any]:
    """One drain of ``setup`` on the runner's target: its figures over the drain window."""
    target, jobs = runner.target, runner.settings.jobs
    plain = system(runner.tools, target, setup)
    keys = json.loads(runner._check_call(plain, [runner.tools.kiq_python, "-m", "bench.systems.kiq_queues"], "keys"))
    setup_system = system(runner.tools, target, setup, tuple(keys["failures"]))
    runner.queue_keys = list(keys["queues"].values())
    runner._reset(setup_system)
    bulk = runner.push(setup_system, "bulk", jobs)
    queued = runner.queue_length(setup_system)
    if queued != jobs:
        raise BenchError(f"after the bulk push the queues {runner.queue_keys} hold {queued} jobs, not {jobs}")
    for key in runner.queue_keys:
        runner.redis.rename(key, key + STAGED_SUFFIX)
    log_path = runner.settings.logs / f"cluster-{setup.name.replace(', ', '-').replace(' ', '_')}.log"
    worker = runner.start_worker(setup_system, log_path)
    result = Result(setup.name, setup.name, f"1 x {CONCURRENCY} threads", jobs=jobs)
    try:
        processes._wait_processes(runner, worker, 1, log_path, key=keys["processes"])
        before = snapshot(runner, worker.pid)
        started = time.perf_counter()
        for key in runner.queue_keys:
            runner.redis.rename(key + STAGED_SUFFIX, key)
        try:
            runner._wait_first_taken(setup_system, worker, log_path, timeout=FIRST_JOB_TIMEOUT)
        except BenchError as exc:
            logged = "; ".join(logged_errors(log_path))
            raise BenchError(f"no job taken within {FIRST_JOB_TIMEOUT:.0f} s: {logged}") from exc
        runner._clock_drain(setup_system, worker, result, log_path, started)
        after = snapshot(runner, worker.pid)
        if result.drained < jobs:
            raise BenchError(f"{jobs - result.drained:,} of {jobs:,} jobs left after {result.drain_seconds:.0f} s")
        runner.check_failures(setup_system, log_path)
    finally:
        runner.stop(worker)
    polls_per_port = {port: 0 for port in target.primaries}
    for key in runner.queue_keys:
        polls_per_port[target.port_of(key)] += 1
    queues = {name: target.port_of(key) for name, key in keys["queues"].items()}
    row = figures(setup, str(bulk["version"]), result, before, after, polls_per_port, runner.poll_cpu, queues)
    return {**row, "notes": runner.notes}


def figures(
    setup: Setup,
    version: str,
    result: Result,
    before: dict[str, Any],
    after: dict[str, Any],
    keys_per_port: dict[int, int],
    poll_cpu: float,
    queues: dict[str, int],
) -> dict[str, Any]:
    """A drain's row: jobs/s, Redis CPU per job (all primaries), worker CPU per job, and per primary its command
    calls and CPU. ``keys_per_port``: how many of the polled queue keys each primary holds (a poll asks each)."""
    drained = result.drained
    polls = after["polls"] - before["polls"]
    nodes = {}
    for port, node_after in after["nodes"].items():
        node_before = before["nodes"][port]
        harness = (polls * keys_per_port.get(port, 0) + SNAPSHOT_POLLS) * poll_cpu
        calls = sum(
            count - node_before["commands"].get(command, (0, 0.0))[0]
            for command, (count, _) in node_after["commands"].items()
            if command not in cost.HARNESS
        )
        cpu = max(0.0, node_after["redis_cpu"] - node_before["redis_cpu"] - harness)
        nodes[str(port)] = {"calls": calls, "redis_us": cpu / drained * 1e6}
    return {
        "setup": setup.name,
        "target": setup.target,
        "fetch": setup.fetch,
        "queues": {name: str(port) for name, port in queues.items()},
        "version": version,
        "jobs": drained,
        "jobs/s": result.drain_rate,
        "redis_us": sum(node["redis_us"] for node in nodes.values()),
        "worker_us": (after["worker_cpu"] - before["worker_cpu"]) / drained * 1e6,
        "nodes": nodes,
    }


def run_rounds(runners: dict[str, ClusterRunner], setups: list[Setup], rounds: int) -> list[dict[str, Any]]:
    """Every setup ``rounds`` times, taking turns; per setup the drain with the median rate, or its error."""
    drains: dict[Setup, list[dict[str, Any]]] = {setup: [] for setup in setups}  # in round order
    errors: dict[Setup, str] = {}
    for round_ in range(rounds):
        for setup in setups if round_ % 2 == 0 else setups[::-1]:
            if setup in errors:
                continue
            runner = runners[setup.target]
            try:
                row = drain(runner, setup)
            except (BenchError, redis.RedisError) as exc:
                errors[setup] = str(exc).strip()
                print(f"   {setup.name}: not measured: {one_line(errors[setup])}", flush=True)
                continue
            finally:
                runner.redis.flushall()
            drains[setup].append({**row, "round": round_})
            print(
                f"   {setup.name}: {row['jobs/s']:,.0f} jobs/s, Redis {row['redis_us']:.2f} µs/job, "
                f"worker {row['worker_us']:.1f} µs/job",
                flush=True,
            )
    out: list[dict[str, Any]] = []
    for setup in setups:
        rows = sorted(drains[setup], key=lambda row: float(row["jobs/s"]))
        if not rows:
            out.append({"setup": setup.name, "target": setup.target, "fetch": setup.fetch, "error": errors[setup]})
            continue
        per_round = [{key: row[key] for key in ("round", *PAIRED)} for row in drains[setup]]
        out.append({**rows[len(rows) // 2], "rounds": per_round})
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5,000 jobs, one round (a few seconds a drain)")
    parser.add_argument("--jobs", type=int, help="no-op jobs per drain (default 50,000; --quick: 5,000)")
    parser.add_argument("--rounds", type=int, help="alternating rounds; the median drain (default 3; --quick: 1)")
    parser.add_argument("--fetches", default="basic,reliable", help="the fetches measured, comma-separated")
    parser.add_argument("--primaries", type=int, default=3)
    parser.add_argument("--port", type=int, default=6490, help="the standalone redis-server's port")
    parser.add_argument("--cluster-port", type=int, default=7600, help="the cluster's first port (one per primary)")
    parser.add_argument("--max-drain-seconds", type=float, default=120.0)
    parser.add_argument("--kiq-python", default=str(ROOT / ".venv/bin/python"))
    parser.add_argument("--no-pin", action="store_true", help="the redis-servers on any CPU (see -m bench)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--report", type=Path, metavar="FILE.json", help="re-render a saved run; run nothing")
    args = parser.parse_args(argv)
    args.jobs = args.jobs or (5_000 if args.quick else 50_000)
    args.rounds = max(1, args.rounds or (1 if args.quick else 3))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        print(markdown(json.loads(args.report.read_text())))
        return 0
    redis_cpus, pusher_cpus = machine.pinning(args.no_pin)
    server = RedisServer(args.port, cpus=redis_cpus)
    cluster = RedisCluster(args.cluster_port, args.primaries, cpus=redis_cpus)
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    settings = Settings(args.jobs, 0, 0, 100.0, args.max_drain_seconds, logs=logs)
    try:
        server.start()
        cluster.start()
        owners = cluster.slot_owners()
        tools = Toolchain(ROOT, server.url, args.kiq_python, args.kiq_python, "", "", False, pusher_cpus=pusher_cpus)
        primaries = dict(zip(cluster.ports(), cluster.clients(), strict=True))
        harness = redis.RedisCluster(host="127.0.0.1", port=args.cluster_port, decode_responses=True)
        targets_ = [Target(STANDALONE, server.url, None, server.client(), {server.port: server.client()})]
        targets_ += [
            Target(f"cluster, slots = {slots}", cluster.url, slots, harness, primaries, owners) for slots in LAYOUTS
        ]
        runners = {target.name: ClusterRunner(tools, settings, target) for target in targets_}
        poll_cpu = runners[STANDALONE].calibrate()
        for runner in runners.values():
            runner.poll_cpu = poll_cpu
        spread_names = spread_queues(owners, SPREAD_QUEUES)
        fetches = [name for name in args.fetches.split(",") if name]
        setups = [Setup(t.name, fetch, ("default",)) for fetch in fetches for t in targets_]
        setups += [Setup(t.name, "basic", spread_names) for t in targets_]
        run: dict[str, Any] = {
            "command": shlex.join(["python", "-m", "bench.cluster", *(sys.argv[1:] if argv is None else argv)]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": machine.describe(args.kiq_python, args.kiq_python, server.version(), False),
            "settings": {
                "jobs": args.jobs, "rounds": args.rounds, "primaries": args.primaries, "poll_us": poll_cpu * 1e6,
                "cluster": cluster.url, "standalone": server.url,
                "spread_queues": {name: (key_slot(name.encode()), owner(owners, key_slot(name.encode())))
                                  for name in spread_names},
            },
        }  # fmt: skip
        run["machine"].pop("python (peers)", None)
        run["machine"]["CPU pinning"] = machine.pinning_text(redis_cpus, pusher_cpus)
        plan = f"{args.jobs:,} jobs, {args.rounds} round(s), 3 queues {', '.join(spread_names)}"
        print(f"== cluster vs standalone, {plan}", flush=True)
        run["drains"] = run_rounds(runners, setups, args.rounds)
        run["machine"]["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    finally:
        cluster.stop()
        server.stop()
    print_and_save(run, markdown(run), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
