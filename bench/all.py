"""``python -m bench.all`` (``make bench``; also ``python -m bench --all``): the whole benchmark in one command.

Runs, one after the other, each in its own process (their own private redis-servers, logs and result files under
``bench/results/logs/all-DATE-TIME/``):

1. ``noop``: ``python -m bench``, the no-op drain of every system (kiq basic, metrics off, reliable, reliable+otel,
   tracking on PostgreSQL, batch; Ruby Sidekiq and the Python peers): drain, pushes, latency idle and under a steady
   5,000 jobs/s load, peak RSS;
2. ``io``: ``python -m bench --io``, the I/O-bound drain (kiq async against arq, taskiq and Dramatiq);
3. ``processes``: ``python -m bench --processes``, kiq ``-p 1``/``-p 2`` beside one and two Sidekiq processes;
4. ``plugins``: bench/plugin_overhead.py, what unique, expiry, the limiters and a batch's block add per job;
5. ``tracking``: bench/tracking_overhead.py on PostgreSQL (in its own schema), tracking's cost on the job thread.
6. ``profile``: bench/profile.py, where the microseconds go: a single push step by step, and the basic and reliable
   drains per job (worker CPU, context switches, Redis CPU, the fetch script's time), what an iterable job adds
   per item (bench/iteration_cost.py) and what ``--metrics-port`` costs the drain (bench/metrics_cost.py,
   alternating pairs).
7. ``workflow``: bench/workflow_cost.py, what a workflow step adds to a plain push-and-run, a chord of 1,000 members
   against Celery's chord on the same redis-server, and a 10,000-member fan-out/fan-in timed.
8. ``cost``: bench/cost.py, the two costs that size a fleet — Redis CPU and worker CPU per job, commands and round
   trips per job, the ceiling of one primary — for Sidekiq, kiq basic and kiq reliable, 1, 2 and 4 worker
   processes on one Redis, and (not with ``--quick``) single pushes and push_bulk against Sidekiq's in five
   alternating pairs.
9. ``cluster``: bench/cluster.py, kiq on a 3-primary Redis Cluster (``slots = "one"`` and ``"queue"``) against one
   standalone redis-server: the drain and the Redis CPU per job (basic and reliable fetch), and how the commands
   spread over the primaries when three queues sit on three of them.
10. ``latency``: bench/latency.py, latency and cost per job at the loads production runs: one raw pipelined pusher
   for every system (kiq basic and reliable, Ruby Sidekiq; one queue and three) at 1,000, 3,000 and 6,000 jobs/s
   (and 20/s over two and three queues), each job recording its latency in a local file; p50/p99, worker and Redis CPU
   per job at each rate.

Then prints and saves (``bench/results/bench-all-DATE-TIME.json`` and ``.md``, the no-op chart as ``.png``) every
table, the features' costs and the issue's targets, each measured value with met / not met. A part that fails is
reported as such; the others still run. Unless ``--no-pin``, the no-op and I/O runs' redis-server runs on the
last CPU and their pushers on the others, and so do plugin_overhead.py and its redis-server (bench/machine.py,
pinning). ``--quick`` (< 3 minutes on a 2-core machine): fewer jobs, one drain per system, kiq's systems and Ruby
Sidekiq only in the no-op run, a 2 s load phase. ``--report FILE.json`` re-renders a saved run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import (
    cluster_report,
    cost,
    groups_cost,
    iteration_cost,
    latency,
    machine,
    processes,
    profile,
    pushes,
    report,
    workflow_cost,
)
from bench.redis_server import RedisServer
from bench.runner import LOAD_SHORT
from bench.systems import BASELINE, Toolchain

ROOT = Path(__file__).resolve().parent.parent
TRACKING_URL = "postgresql+psycopg://kiq:kiq@127.0.0.1:5433/kiq"
OVERHEAD_SCHEMA = "kiq_bench_overhead"  # tracking_overhead.py's tables, apart from the no-op run's (kiq_bench)
QUICK_SYSTEMS = "kiq_basic,kiq_no_metrics,kiq_reliable,kiq_otel,kiq_tracking,kiq_batch,sidekiq"
PARTS = (
    "noop",
    "io",
    "processes",
    "plugins",
    "tracking",
    "profile",
    "workflow",
    "cost",
    "cluster",
    "groups",
    "latency",
)

# the issue's targets (performance rounds 2 and 3; the cost ones are bench/cost.py's), and round 1's I/O ones
LATENCY_IDLE_P99_MS = 2.0
LATENCY_LOAD_P99_MS = 10.0
METRICS_COST = 0.03  # of the drain
METRICS_PORT_COST = 0.02  # of the drain (operations round: issue 33)
TRACKING_RATE = 20_000.0
SINGLE_PUSH_RATIO = 1.5
BULK_PUSH_RATIO = 2.5
OTEL_PUSH_COST = 0.10
ITERATION_TARGET_US = iteration_cost.TARGET_US  # issue 32
DRAIN_RATIOS = {"kiq_reliable": 3.0, "kiq_basic": 4.0}
SECOND_PROCESS_RATIO = 1.8  # -p 2 over -p 1, no-op drain


# -- running the parts -----------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.all", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a development run, under 3 minutes on 2 cores")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of: {', '.join(PARTS)}")
    parser.add_argument("--systems", help="the no-op run's systems (default: all; --quick: kiq's and Sidekiq)")
    parser.add_argument(
        "--port", type=int, default=6391, help="the private redis-server's port (the processes run's: the next one)"
    )
    parser.add_argument("--kiq-python", default=str(ROOT / ".venv/bin/python"))
    parser.add_argument("--peer-python", default=str(ROOT / ".venv-bench/bin/python"))
    parser.add_argument("--tracking-url", default=os.environ.get("BENCH_TRACKING_DATABASE_URL", TRACKING_URL))
    parser.add_argument("--no-pin", action="store_true", help="redis-server and the pushers on any CPU (see -m bench)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results")
    parser.add_argument("--report", type=Path, metavar="FILE.json", help="re-render a saved run; run nothing")
    args = parser.parse_args(argv)
    unknown = [part for part in args.parts.split(",") if part not in PARTS]
    if unknown:
        parser.error(f"unknown parts {unknown}; known: {', '.join(PARTS)}")
    return args


def free_port() -> int:
    """A free loopback port, for plugin_overhead.py's private redis-server."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def commands(args: argparse.Namespace, work: Path, plugins_port: int) -> dict[str, list[str]]:
    """Each part's command line (the harness parts run with this interpreter: the peers' venv under make)."""
    quick = args.quick
    me, port = [sys.executable, "-m", "bench"], str(args.port)
    common = ["--out", str(work), "--kiq-python", args.kiq_python]
    harness = [*common, "--peer-python", args.peer_python, "--port", port, *(["--no-pin"] if args.no_pin else [])]
    if quick:
        noop = ["--jobs", "20000", "--single-jobs", "5000", "--drain-runs", "1", "--load-seconds", "2"]
        noop += ["--max-drain-seconds", "60", "--stop-timeout", "5"]
        # Dramatiq with 1,000 threads can take the default 30 s to stop (then it is killed): not worth waiting for
        io = ["--jobs", "5000", "--io-concurrency", "1000", "--max-drain-seconds", "60", "--stop-timeout", "5"]
    else:
        noop = ["--jobs", "100000", "--max-drain-seconds", "120", "--single-runs", "5"]
        io = ["--jobs", "20000", "--io-concurrency", "1000", "--max-drain-seconds", "120"]
    systems = args.systems or (QUICK_SYSTEMS if quick else None)
    noop += ["--systems", systems] if systems else []
    procs = ["--jobs", "20000", "--cpu-jobs", "1000", "--drain-runs", "1"] if quick else []
    plugin_jobs, plugin_runs = ("2000", "1") if quick else ("5000", "3")
    tracking_url = Toolchain(ROOT, "", "", "", args.tracking_url, OVERHEAD_SCHEMA, False).tracking_url_in_schema
    return {
        "noop": [*me, *noop, *harness, "--tracking-url", args.tracking_url, "--stem", "noop"],
        "io": [*me, "--io", *io, *harness, "--stem", "io"],
        "processes": [*me, "--processes", *procs, *common, "--port", str(args.port + 1), "--stem", "processes"],
        "plugins": [args.kiq_python, "bench/plugin_overhead.py", "--jobs", plugin_jobs, "--runs", plugin_runs,
                    "--redis-url", f"redis://127.0.0.1:{plugins_port}/0", "--json", str(work / "plugins.json")],
        "tracking": [args.kiq_python, "bench/tracking_overhead.py", "--jobs", "5000" if quick else "20000",
                     "--database-url", tracking_url, "--json", str(work / "tracking.json")],
        "profile": [args.kiq_python, "-m", "bench.profile", "--jobs", "20000" if quick else "100000",
                    "--pushes", "5000" if quick else "20000", "--port", str(args.port + 2),
                    "--metrics-pairs", "2" if quick else "4",
                    *(["--no-pin"] if args.no_pin else []), "--json", str(work / "profile.json")],
        "workflow": [*me[:2], "bench.workflow_cost", *(["--quick"] if quick else []), "--port", str(args.port + 3),
                     "--kiq-python", args.kiq_python, "--peer-python", args.peer_python,
                     *(["--no-pin"] if args.no_pin else []), "--json", str(work / "workflow.json"),
                     "--logs", str(work / "workflow")],
        "cost": [sys.executable, "-m", "bench.cost",
                 *(["--jobs", "10000", "--rounds", "1", "--fleet", "1,2", "--push-rounds", "0"] if quick else []),
                 "--port", str(args.port + 4), "--kiq-python", args.kiq_python,
                 *(["--no-pin"] if args.no_pin else []), "--out", str(work), "--json", str(work / "cost.json")],
        "cluster": [sys.executable, "-m", "bench.cluster", *(["--quick"] if quick else []),
                    "--port", str(args.port + 5), "--kiq-python", args.kiq_python,
                    *(["--no-pin"] if args.no_pin else []), "--out", str(work), "--json", str(work / "cluster.json")],
        "groups": [args.kiq_python, "-m", "bench.groups_cost", "--jobs", "5000" if quick else "20000",
                   "--runs", "1" if quick else "3", "--port", str(args.port + 6), "--json", str(work / "groups.json")],
        "latency": [sys.executable, "-m", "bench.latency", *(["--quick"] if quick else []), "--port",
                    str(args.port + 7), "--kiq-python", args.kiq_python, "--out", str(work / "latency"),
                    "--json", str(work / "latency.json")],
    }  # fmt: skip


def run_part(name: str, command: list[str], work: Path, cpus: frozenset[int] | None = None) -> str | None:
    """Run one part; its progress lines are shown, its whole output kept in ``work/NAME.log``. None, or the error."""
    log_path = work / f"{name}.log"
    print(f"\n### {name}: {shlex.join(_short(command))}", flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log_path.open("w") as log, subprocess.Popen(
        command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    ) as child:  # fmt: skip
        assert child.stdout is not None
        echo = True  # the progress lines; from the first empty one on, the part prints its tables: kept for the end
        for line in child.stdout:
            log.write(line)
            echo = echo and bool(line.strip())
            if echo:
                print(f"  {line}", end="", flush=True)
    if child.returncode != 0:
        tail = log_path.read_text(errors="replace")[-1500:]
        return f"exited with {child.returncode}; see {log_path}: {tail}"
    return None


def _short(command: list[str]) -> list[str]:
    """A command line with the checkout's paths relative (as shown and saved)."""
    return [os.path.relpath(word, ROOT) if word.startswith(str(ROOT)) else word for word in command]


def part_result(name: str, work: Path) -> dict[str, Any]:
    return dict(json.loads((work / f"{name}.json").read_text()))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        print(markdown(json.loads(args.report.read_text())))
        return 0
    started = time.monotonic()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = args.out / "logs" / f"all-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    wanted = args.parts.split(",")
    plugins_port = free_port()
    plan = {name: command for name, command in commands(args, work, plugins_port).items() if name in wanted}
    run: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "bench.all", *(sys.argv[1:] if argv is None else argv)]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "quick": args.quick,
        "commands": {name: shlex.join(_short(command)) for name, command in plan.items()},
        "parts": {},
        "errors": {},
    }
    for name, command in plan.items():
        part_started = time.monotonic()
        # the other parts start their own redis-server; plugin_overhead.py's is pinned apart from it as the no-op
        # run pins its pushers (bench/machine.py, pinning)
        redis_cpus, client_cpus = machine.pinning(args.no_pin or name != "plugins")
        server = RedisServer(plugins_port, cpus=redis_cpus) if name == "plugins" else None
        try:
            if server is not None:
                server.start()
            if name == "tracking":
                _reset_schema(args)
            error = run_part(name, command, work, client_cpus)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
            error = str(exc)
        finally:
            if server is not None:
                server.stop()
        if error is None:
            try:
                run["parts"][name] = part_result(name, work)
            except (OSError, ValueError) as exc:
                error = f"no result: {exc}"
        if error is not None:
            run["errors"][name] = error
            print(f"  {name} failed: {error[:300]}", flush=True)
        print(f"  ({name}: {time.monotonic() - part_started:.0f} s)", flush=True)
    run["seconds"] = round(time.monotonic() - started, 1)
    text = markdown(run)
    print()
    print(text)
    stem = f"bench-all-{stamp}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(run, indent=2) + "\n")
    (args.out / f"{stem}.md").write_text(text)
    print(f"wrote {args.out / stem}.json and .md")
    if "noop" in run["parts"] and report.plot(run["parts"]["noop"], args.out / f"{stem}.png"):
        print(f"wrote {args.out / stem}.png")
    print(f"the whole run took {_duration(run['seconds'])}")
    return 0


def _reset_schema(args: argparse.Namespace) -> None:
    reset = [args.kiq_python, "-m", "bench.systems.tracking_db", "reset", args.tracking_url, OVERHEAD_SCHEMA]
    done = subprocess.run(reset, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"could not reset the schema {OVERHEAD_SCHEMA}: {done.stderr[-500:]}")


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


# -- the report ------------------------------------------------------------------------------------------
def markdown(run: dict[str, Any]) -> str:
    parts, errors, commands_ = run["parts"], run.get("errors", {}), run.get("commands", {})
    machine: dict[str, str] = next((part["machine"] for part in parts.values() if "machine" in part), {})
    lines = [f"# kiq benchmark{' (--quick)' if run.get('quick') else ''}, {run['date']}", ""]
    lines += [f"- command: `{run['command']}`; took {_duration(run.get('seconds', 0))}"]
    lines += [f"- {key}: {value}" for key, value in machine.items() if key not in ("load average at end",)]
    sections: list[tuple[str, str, Callable[[dict[str, Any]], str]]] = [
        ("noop", "No-op drain (ratios to Ruby Sidekiq)", _noop_section),
        ("io", "I/O-bound drain: async jobs that each await 50 ms", _io_section),
        ("processes", "More processes: kiq -p 1 / -p 2 beside one and two Sidekiq processes", processes.table),
        ("plugins", "Plugins, µs per job (bench/plugin_overhead.py)", _plugins_section),
        ("tracking", "Tracking on the job thread (bench/tracking_overhead.py, PostgreSQL)", _tracking_section),
        ("profile", "Where the microseconds go (bench/profile.py)", profile.markdown),
        ("workflow", "Workflows (bench/workflow_cost.py)", workflow_cost.markdown),
        ("cost", "Cost per job, and how far one Redis carries a fleet (bench/cost.py)", cost.markdown),
        ("cluster", "A 3-primary Redis Cluster against one redis-server (bench/cluster.py)", cluster_report.markdown),
        ("groups", "Job groups (bench/groups_cost.py)", groups_cost.markdown),
        ("latency", "Latency and cost per job at the loads production runs (bench/latency.py)", latency.markdown),
    ]
    for name, title, render in sections:
        if name not in parts and name not in errors:
            continue
        lines += ["", f"## {title}", ""]
        lines += [f"`{commands_[name]}`", ""] if name in commands_ else []
        lines.append((render(parts[name]) if name in parts else f"**failed**: {errors[name]}").rstrip())
    lines += ["", "## What the features cost", "", render_rows(["feature", "cost", "measured as"], costs(parts))]
    lines += ["", "## Targets", "", render_rows(["target", "measured", "result"], targets(parts))]
    return "\n".join(lines).rstrip() + "\n"


def render_rows(headers: list[str], rows: list[list[str]]) -> str:
    return report.render_table([headers, ["---"] * len(headers), *rows], [])


def _noop_section(run: dict[str, Any]) -> str:
    settings = run["settings"]
    runs = settings["drain_runs"]
    head = (
        f"{settings['jobs']:,} no-op jobs per drain ({f'median of {runs} drains' if runs > 1 else 'one drain'}), "
        "one worker process; "
        f"latency at {settings['latency_rate']:g} jobs/s (idle) and under a steady {settings['load_rate']:,.0f} "
        f"jobs/s for {settings['load_seconds']:g} s.\n\n"
    )
    pushed = [f"{r['label']}: {r['load_rate_achieved']:,.0f}" for r in run["results"] if r.get("load_rate_achieved")]
    if pushed:
        head += f"The load as pushed (one pusher process each, jobs/s): {'; '.join(pushed)}.\n\n"
    return head + report.table(run["results"], load_rate=settings.get("load_rate"))


def _io_section(run: dict[str, Any]) -> str:
    return f"{run['settings']['jobs']:,} jobs.\n\n{report.io_table(run)}"


def _plugins_section(part: dict[str, Any]) -> str:
    rows = [
        [row["what"], f"{row['us_per_job']:.1f}", f"{row['added_us']:+.1f}" if row["added_us"] else ""]
        for row in part["rows"]
    ]
    settings = part["settings"]
    head = f"{settings['jobs']:,} jobs, median of {settings['runs']} runs, on a private redis-server (TCP).\n\n"
    return head + render_rows(["what", "µs per job", "added by the plugin (µs)"], rows)


def _tracking_section(part: dict[str, Any]) -> str:
    rows = [
        ["server chain, no tracking", f"{part['chain_us']:.1f} µs/job"],
        ["server chain, tracked", f"{part['tracked_us']:.1f} µs/job ({part['added_us']:+.1f})"],
        ["tracked + one message per job", f"{part['noisy_us']:.1f} µs/job"],
        ["writer, every job's rows written", f"{part['end_to_end_rate']:,.0f} jobs/s end to end"],
    ]
    return f"{part['jobs']:,} jobs through the chain, no Redis.\n\n" + render_rows(["what", "figure"], rows)


# -- costs and targets -----------------------------------------------------------------------------------
def _result(parts: dict[str, Any], name: str, part: str = "noop") -> dict[str, Any] | None:
    results = parts.get(part, {}).get("results", [])
    return next((r for r in results if r["system"] == name and not r.get("error")), None)


def _value(parts: dict[str, Any], name: str, key: str, part: str = "noop") -> float | None:
    result = _result(parts, name, part)
    value = result.get(key) if result else None
    return float(value) if value else None


def _us_more(slow: float | None, fast: float | None) -> str:
    """What ``slow`` jobs/s costs per job over ``fast`` jobs/s, in µs."""
    if not slow or not fast:
        return "not measured"
    return f"{1e6 / slow - 1e6 / fast:+.1f} µs/job"


def _pair(parts: dict[str, Any], off: str, on: str, key: str) -> tuple[float | None, float | None, float | None]:
    """The no-op run's ``key`` of a system without a feature and of one with it, and the share lost (``_share``)."""
    without, with_ = _value(parts, off, key), _value(parts, on, key)
    return without, with_, _share(without, with_)


def _share(off: float | None, on: float | None) -> float | None:
    """How much slower ``on`` is than ``off`` (rates), as a fraction of ``off``."""
    return (off - on) / off if off and on else None


def _of_drain(share: float | None) -> str:
    if share is None:
        return "not measured"
    return f"{share:.1%} of the drain" if share >= 0 else f"none (the drain {-share:.1%} faster with it: noise)"


def _slower(share: float | None) -> str:
    if share is None:
        return "not measured"
    return f"{share:.1%} slower" if share >= 0 else f"{-share:.1%} faster (noise)"


def _rate(value: float | None) -> str:
    return f"{value:,.0f}" if value else "-"


def costs(parts: dict[str, Any]) -> list[list[str]]:
    v = _value
    rows: list[list[str]] = []
    no_metrics, basic, share = _pair(parts, "kiq_no_metrics", "kiq_basic", "drain_rate")
    rows.append([
        "dashboard metrics (per-class counts, written per heartbeat)",
        _of_drain(share),
        f"no-op drain: kiq basic {_rate(basic)} vs metrics off {_rate(no_metrics)} jobs/s",
    ])  # fmt: skip
    for key, what, measured in (
        ("push_single_rate", "single push", "single pushes"),
        ("drain_rate", "drain", "no-op drain"),
    ):
        reliable, otel, share = _pair(parts, "kiq_reliable", "kiq_otel", key)
        rows.append([
            f"OpenTelemetry plugin, no SDK: {what}",
            _slower(share),
            f"{measured}: kiq reliable+otel {_rate(otel)} vs kiq reliable {_rate(reliable)} jobs/s",
        ])  # fmt: skip
    batch, settled = v(parts, "kiq_batch", "drain_rate"), v(parts, "kiq_batch", "settled_rate")
    rows += [
        ["batch: drain", _us_more(batch, basic), f"kiq batch {_rate(batch)} vs kiq basic {_rate(basic)} jobs/s"],
        ["batch: drain until every outcome is counted in the batch", _us_more(settled, basic),
         f"kiq batch {_rate(settled)} (first job taken → batch counts all) vs kiq basic {_rate(basic)} jobs/s"],
    ]  # fmt: skip
    for key, what in (("push_bulk_rate", "push bulk"), ("push_single_rate", "push single")):
        with_batch, without = v(parts, "kiq_batch", key), v(parts, "kiq_basic", key)
        rows.append([
            f"batch: {what} (inside one `with Batch(...)` block)", _us_more(with_batch, without),
            f"kiq batch {_rate(with_batch)} vs kiq basic {_rate(without)} jobs/s",
        ])  # fmt: skip
    for row in parts.get("plugins", {}).get("rows", []):
        what = str(row["what"])
        if what.startswith(("PING", "push, no plugin", "server chain, no plugin")):
            continue
        cost = f"{row['added_us']:+.1f} µs/job" if row["added_us"] else f"{row['us_per_job']:.1f} µs per use"
        rows.append([what, cost, "bench/plugin_overhead.py (the same path without the plugin)"])
    for row in parts.get("profile", {}).get("arguments", []):
        rows.append([
            row["what"], f"{row['added_us']:+.1f} µs",
            f"bench/arguments_cost.py: {row['us']:.1f} vs {row['plain_us']:.1f} µs positional and unannotated",
        ])  # fmt: skip
    for row in parts.get("profile", {}).get("schedule", []):
        rows.append([
            row["what"], f"{row['added_us']:+.1f} µs/job",
            f"bench/schedule_cost.py: {row['us']:.1f} vs {row['plain_us']:.1f} µs without it"
            + (f"; Redis CPU {row['redis_us']} µs per PUBLISH" if row.get("redis_us") is not None else ""),
        ])  # fmt: skip
    for row in parts.get("profile", {}).get("activejob", []):
        rows.append([
            row["what"], f"{row['added_us']:+.1f} µs/job",
            f"bench/activejob_cost.py: {row['us']:.1f} vs {row['plain_us']:.1f} µs a plain job (parse and look up)",
        ])  # fmt: skip
    for row in parts.get("profile", {}).get("encryption", []):
        rows.append([
            row["what"], f"{row['added_us']:+.1f} µs/job",
            f"bench/encryption_cost.py: {row['us']:.1f} vs {row['plain_us']:.1f} CPU µs the job without the plugin",
        ])  # fmt: skip
    for row in parts.get("profile", {}).get("profiling", []):
        rows.append([
            row["what"], f"{row['added_us']:+.2f} µs/job",
            f"bench/profiling_cost.py: {row['us']:.2f} vs {row['plain_us']:.2f} µs the same server chain without it",
        ])  # fmt: skip
    for row in parts.get("profile", {}).get("iteration", []):
        rows.append([
            row["what"], f"{row['added_us']:+.2f} µs/item",
            f"bench/iteration_cost.py: {row['us']:.2f} vs {row['plain_us']:.2f} µs a plain loop in perform",
        ])  # fmt: skip
    for row in parts.get("profile", {}).get("metrics_port", {}).get("rows", []):
        rows.append([
            row["what"], f"{_of_drain(row['share'])} ({row['added_us']:+.1f} µs/job)",
            f"bench/metrics_cost.py: {_rate(row['on_rate'])} vs {_rate(row['off_rate'])} jobs/s off (median of "
            f"alternating pairs), worker CPU {row['on_cpu_us']} vs {row['off_cpu_us']} µs/job; a scrape meanwhile: "
            f"p50 {row['scrape_p50_ms']} ms, max {row['scrape_max_ms']} ms",
        ])  # fmt: skip
    tracking_drain, tracking_settled = v(parts, "kiq_tracking", "drain_rate"), v(parts, "kiq_tracking", "settled_rate")
    rows.append([
        "tracking on PostgreSQL", f"{_rate(tracking_settled)} jobs/s settled",
        f"no-op drain {_rate(tracking_drain)} jobs/s; settled: first job taken → every job's row finished",
    ])  # fmt: skip
    if "tracking" in parts:
        part = parts["tracking"]
        rows.append([
            "tracking: the job thread", f"{part['added_us']:+.1f} µs/job",
            f"bench/tracking_overhead.py; its writer: {part['end_to_end_rate']:,.0f} jobs/s end to end",
        ])  # fmt: skip
    if "workflow" in parts:
        rows += workflow_cost.rows(parts["workflow"])
    io = parts.get("io")
    if io is not None:
        best = report.best_peer(io["results"])
        kiq_rate, best_rate = v(parts, "kiq_io", "drain_rate", "io"), best["drain_rate"] if best else None
        rows.append([
            "async jobs: I/O-bound drain",
            f"{kiq_rate / best_rate:.2f}x the best peer" if kiq_rate and best_rate else "not measured",
            f"kiq async {_rate(kiq_rate)} vs {best['label'] if best else '-'} {_rate(best_rate)} jobs/s, "
            "one process, 1,000 in flight",
        ])  # fmt: skip
    rows += cluster_report.costs(parts["cluster"]) if "cluster" in parts else []
    rows += groups_cost.costs(parts["groups"]) if "groups" in parts else []
    procs = parts.get("processes")
    if procs is not None:
        for kind, what in (("noop", "no-op"), ("cpu", "CPU-bound")):
            results = [r for r in procs["results"] if r["kind"] == kind]
            kiq2, sidekiq2 = processes._rate(results, "kiq_p2"), processes._rate(results, "sidekiq_x2")
            kiq1 = processes._rate(results, "kiq_p1")
            rows.append([
                f"-p 2: {what} drain", f"{kiq2 / sidekiq2:.2f}x Sidekiq x2" if kiq2 and sidekiq2 else "not measured",
                f"kiq -p 2 {_rate(kiq2)} (-p 1 {_rate(kiq1)}) vs two Sidekiq processes {_rate(sidekiq2)} jobs/s",
            ])  # fmt: skip
    return rows


def _ratio_target(parts: dict[str, Any], name: str, key: str, ratio: float, what: str) -> list[str]:
    """A "kiq's ``key`` ≥ ``ratio`` x Sidekiq's" row of the targets, from the no-op run."""
    mine, sidekiq = _value(parts, name, key), _value(parts, BASELINE, key)
    return [
        f"{what} ≥ {ratio:g}x Sidekiq",
        f"{_rate(mine)} / {_rate(sidekiq)} = **{mine / sidekiq:.2f}x**" if mine and sidekiq else "-",
        _met(None if not (mine and sidekiq) else mine / sidekiq >= ratio),
    ]


def _met(met: bool | None) -> str:
    return "not measured" if met is None else ("met" if met else "**not met**")


def targets(parts: dict[str, Any]) -> list[list[str]]:
    v = _value
    rows: list[list[str]] = []
    core = ("kiq_basic", "kiq_reliable")
    load_rate = parts.get("noop", {}).get("settings", {}).get("load_rate", 5000)

    def latency(key: str, limit: float, what: str, load: bool = False) -> None:
        """Both of kiq's fetches (basic, reliable) must meet it; under load, at the rate asked."""
        shown, met, measured = [], True, True
        for name in core:
            label, value = name.removeprefix("kiq_"), v(parts, name, key)
            if value is None:
                shown.append(f"{label} -")
                measured = False
                continue
            text = f"{label} **{value:.2f} ms**"
            if load:
                achieved = v(parts, name, "load_rate_achieved") or 0.0
                text += f" (at {achieved:,.0f} jobs/s)"
                measured = measured and achieved >= LOAD_SHORT * load_rate  # else not a measure at the rate
            shown.append(text)
            met = met and value <= limit
        rows.append([what, ", ".join(shown), _met(met if measured else None)])

    latency("latency_p99_ms", LATENCY_IDLE_P99_MS, f"latency push→perform p99 ≤ {LATENCY_IDLE_P99_MS:g} ms, idle")
    latency(
        "load_p99_ms", LATENCY_LOAD_P99_MS,
        f"latency p99 ≤ {LATENCY_LOAD_P99_MS:g} ms under a steady {load_rate:,.0f} jobs/s", load=True,
    )  # fmt: skip
    no_metrics, basic, share = _pair(parts, "kiq_no_metrics", "kiq_basic", "drain_rate")
    measured = "-" if share is None else f"**{_of_drain(share)}** ({_rate(basic)} vs {_rate(no_metrics)} jobs/s off)"
    paired = cost.metrics_share(parts["cost"]["cost"]) if "cost" in parts else None
    if paired is not None:  # the alternating drains' worker CPU: the steadier measure on a busy machine
        share = paired[2]
        measured += f"; worker CPU, alternating drains: **{share:+.1%}** ({paired[0]:.1f} vs {paired[1]:.1f} µs/job)"
    rows.append([
        f"dashboard metrics ≤ {METRICS_COST:.0%} of the drain", measured,
        _met(None if share is None else share <= METRICS_COST),
    ])  # fmt: skip
    port = parts.get("profile", {}).get("metrics_port")
    rows.append([
        f"kiq worker --metrics-port ≤ {METRICS_PORT_COST:.0%} of the drain",
        f"**{_of_drain(port['share'])}** (median of {len(port['pairs'])} alternating pairs)" if port else "-",
        _met(None if port is None else port["share"] <= METRICS_PORT_COST),
    ])  # fmt: skip
    settled, drained = v(parts, "kiq_tracking", "settled_rate"), v(parts, "kiq_tracking", "drain_rate")
    rows.append([
        f"tracking on PostgreSQL ≥ {TRACKING_RATE:,.0f} jobs/s",
        f"**{_rate(settled)}** jobs/s settled (every row finished; drained {_rate(drained)})" if settled else "-",
        _met(None if settled is None else settled >= TRACKING_RATE),
    ])  # fmt: skip
    rows.append(_ratio_target(parts, "kiq_basic", "push_single_rate", SINGLE_PUSH_RATIO, "single push (kiq basic)"))
    rows += pushes.targets(parts["cost"]["pushes"]) if parts.get("cost", {}).get("pushes") else []
    off, on, share = _pair(parts, "kiq_reliable", "kiq_otel", "push_single_rate")
    measured = f"**{_slower(share)}** ({_rate(on)} vs {_rate(off)} single pushes/s)" if share is not None else "-"
    plugin_rows = {row["what"]: row for row in parts.get("plugins", {}).get("rows", [])}
    micro, plain = plugin_rows.get("push, otel plugin, no SDK"), plugin_rows.get("push, no plugin")
    if micro and plain:
        measured += (
            f"; plugin_overhead.py: {micro['us_per_job']:.1f} vs {plain['us_per_job']:.1f} µs a push "
            f"({micro['added_us'] / plain['us_per_job']:+.0%})"
        )
    rows.append([
        f"single push with OTel on (no SDK) ≤ {OTEL_PUSH_COST:.0%} slower than off",
        measured,
        _met(None if share is None else share <= OTEL_PUSH_COST),
    ])  # fmt: skip
    rows.append(_ratio_target(parts, "kiq_basic", "push_bulk_rate", BULK_PUSH_RATIO, "push_bulk of 1,000"))
    for name, ratio in DRAIN_RATIOS.items():
        rows.append(_ratio_target(parts, name, "drain_rate", ratio, f"{name.removeprefix('kiq_')} drain"))
    procs = parts.get("processes")
    noop = [r for r in procs["results"] if r["kind"] == "noop"] if procs else []
    one, two = processes._rate(noop, "kiq_p1"), processes._rate(noop, "kiq_p2")
    rows.append([
        f"-p 2 ≥ {SECOND_PROCESS_RATIO:g}x -p 1 (no-op drain)",
        f"{_rate(two)} / {_rate(one)} = **{two / one:.2f}x**" if one and two else "-",
        _met(None if not (one and two) else two / one >= SECOND_PROCESS_RATIO),
    ])  # fmt: skip
    walks = parts.get("profile", {}).get("iteration", [])
    worst = max((row["added_us"] for row in walks), default=None)
    rows.append([
        f"(iterable jobs) per-item cost ≤ {ITERATION_TARGET_US:g} µs over a plain loop, 5 s flush",
        f"**{worst:+.2f} µs** (the slower enumerator)" if worst is not None else "-",
        _met(None if worst is None else worst <= ITERATION_TARGET_US),
    ])  # fmt: skip
    rows += cost.targets(parts["cost"]["cost"]) if "cost" in parts else []
    rows += cluster_report.targets(parts["cluster"]) if "cluster" in parts else []
    io = parts.get("io")
    kiq_io = _result(parts, "kiq_io", "io")
    best = report.best_peer(io["results"]) if io else None
    ratio = kiq_io["drain_rate"] / best["drain_rate"] if kiq_io and best else None
    rows.append([
        f"(round 1) kiq async ≥ {report.IO_TARGET_RATIO:g}x the best peer per process, I/O-bound",
        f"**{ratio:.2f}x** ({best['label']})" if ratio is not None and best else "-",
        _met(None if ratio is None else ratio >= report.IO_TARGET_RATIO),
    ])  # fmt: skip
    rate = kiq_io["drain_rate"] if kiq_io else None
    rows.append([
        f"(round 1) ≥ {report.IO_TARGET_RATE:,.0f} I/O jobs/s in one worker process",
        f"**{_rate(rate)}** jobs/s" if rate else "-",
        _met(None if rate is None else rate >= report.IO_TARGET_RATE),
    ])  # fmt: skip
    return rows


if __name__ == "__main__":
    sys.exit(main())
