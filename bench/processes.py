"""``python -m bench --processes``: what a second worker process buys, kiq's ``-p 2`` beside two Ruby Sidekiq
processes, in one run on one private redis-server (issue 16).

Four setups: kiq ``-p 1``, kiq ``-p 2`` (its swarm: two forked workers), Sidekiq x1 and Sidekiq x2 (Sidekiq 6
has no swarm: bench/multi.py starts two ``sidekiq`` processes together, one worker to the harness), each with
10 threads per process. Two drains, timed from outside like the main benchmark (bench/runner.py: the clock
starts at the first job taken and stops when the queue is empty): the no-op jobs (``--jobs``), and CPU-bound
jobs that each spin ~1 ms of their thread's CPU time (``--cpu-jobs``; bench/systems/kiq_cpu.py,
sidekiq_cpu.rb), where a process is held to one core by its GIL/GVL and a second process should double the
rate. The setups take turns within each round (``--drain-runs`` rounds; medians reported), so a noisy moment
on a shared machine hits them alike. Reported: jobs/s with the ratio to Sidekiq x1, each system's speed-up of
2 processes over 1, the cores the worker's process tree kept busy over the drain, and its peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import machine, procs
from bench.redis_server import RedisServer
from bench.report import machine_lines, render_table
from bench.runner import BOOT_TIMEOUT, BenchError, Result, Runner, Settings, _tail
from bench.systems import CONCURRENCY, System, Toolchain

ROOT = Path(__file__).resolve().parent.parent
C = str(CONCURRENCY)
DRAINS = {  # drain kind -> (kiq's job module, the Ruby job file)
    "noop": ("bench.systems.kiq_jobs", "bench/systems/sidekiq_jobs.rb"),
    "cpu": ("bench.systems.kiq_cpu", "bench/systems/sidekiq_cpu.rb"),
}
BASELINE = "sidekiq_x1"
STAGED = "bench:staged"  # where the pushed jobs wait while the worker boots
PROCESSES = "processes"  # the SET of live worker processes, kiq's as Sidekiq's
READY_PAUSE = 0.5  # seconds between the last process registered and the jobs released


def _kiq(processes: int, module: str, fetch: str = "basic") -> System:
    """kiq ``-p processes``; another fetch than basic is in the name (``kiq_reliable_p2``) and the label."""

    def worker(t: Toolchain) -> list[str]:
        command = [t.kiq_python, "-m", "kiq.cli", "worker", "-r", module, "-c", C, "-p", str(processes)]
        return [*command, "--redis-url", t.redis_url, "--fetch", fetch]

    kind = "" if fetch == "basic" else f"{fetch}_"
    return System(
        name=f"kiq_{kind}p{processes}",
        label=f"kiq {kind.rstrip('_')} -p {processes}".replace("  ", " "),
        worker=worker,
        pusher=lambda t: [t.kiq_python, "-m", "bench.systems.common", module],
        queue_key="queue:default",
        env=lambda t: {"KIQ_REDIS_URL": t.redis_url, "KIQ_LOG_LEVEL": "WARNING"},
        failure_keys=("retry", "dead"),
        concurrency=f"{processes} x {C} threads",
    )


def _sidekiq(processes: int, script: str) -> System:
    def worker(t: Toolchain) -> list[str]:
        command = ["sidekiq", "-r", str(t.root / script), "-c", C, "-q", "default"]
        return command if processes == 1 else [t.kiq_python, "-m", "bench.multi", str(processes), *command]

    return System(
        name=f"sidekiq_x{processes}",
        label=f"Sidekiq (Ruby) x{processes}",
        worker=worker,
        pusher=lambda t: ["ruby", str(t.root / script)],
        queue_key="queue:default",
        env=lambda t: {"REDIS_URL": t.redis_url, **({"RUBYOPT": "--yjit"} if t.yjit else {})},
        failure_keys=("retry", "dead"),
        concurrency=f"{processes} x {C} threads" + (" (bench/multi.py)" if processes > 1 else ""),
    )


def systems(kind: str) -> list[System]:
    module, script = DRAINS[kind]
    return [_kiq(1, module), _kiq(2, module), _sidekiq(1, script), _sidekiq(2, script)]


def drain_once(runner: Runner, system: System, result: Result) -> None:
    """A bulk push, then the worker started and the drain timed; the tree's CPU time over it is kept too."""
    jobs = runner.settings.jobs
    runner._reset(system)
    bulk = runner.push(system, "bulk", jobs)
    result.version = bulk["version"]
    queued = runner.queue_length(system)
    if queued != jobs:
        raise BenchError(f"after the bulk push {system.queue_key} holds {queued} jobs, not {jobs}")
    log_path = runner.settings.logs / f"procs-{system.name}.log"
    # the jobs wait under another key until every process is up, so a second process booting late doesn't
    # count against it: RENAME back is atomic, and the clock starts at the first job taken after it
    runner.redis.rename(system.queue_key, STAGED)
    worker = runner.start_worker(system, log_path)
    try:
        _wait_processes(runner, worker, int(system.name[-1]), log_path)
        runner.redis.rename(STAGED, system.queue_key)
        started, _ = runner._wait_first_taken(system, worker, log_path)
        cpu_before = procs.cpu_seconds(worker.pid)
        runner._clock_drain(system, worker, result, log_path, started)
        cpu = procs.cpu_seconds(worker.pid) - cpu_before
        assert result.drain_rate is not None and result.drain_seconds
        result.drain_rates.append(result.drain_rate)
        result.cpu_us_per_job_runs.append(cpu / result.drain_seconds)  # here: cores kept busy over the drain
        runner.check_failures(system, log_path)
    finally:
        runner.stop(worker)


def _wait_processes(
    runner: Runner, worker: subprocess.Popen[bytes], count: int, log: Path, key: str = PROCESSES
) -> None:
    """Until ``count`` worker processes have registered in the ``processes`` set (kiq and Sidekiq alike; ``key``:
    where it is, a cluster's kiq names it otherwise), then a moment for their fetchers to block on the queue."""
    deadline = time.monotonic() + BOOT_TIMEOUT
    while runner.redis.scard(key) < count:
        if worker.poll() is not None:
            raise BenchError(f"the worker exited with {worker.returncode} while booting: {_tail(log)}")
        if time.monotonic() > deadline:
            raise BenchError(f"{count} worker processes did not register within {BOOT_TIMEOUT:.0f} s: {_tail(log)}")
        time.sleep(0.05)
    time.sleep(READY_PAUSE)


def run_kind(tools: Toolchain, settings: Settings, kind: str, rounds: int) -> list[dict[str, Any]]:
    runner = Runner(tools, settings)
    setups = systems(kind)
    results = {s.name: Result(s.name, s.label, s.concurrency, jobs=settings.jobs) for s in setups}
    for round_ in range(rounds):
        order = setups if round_ % 2 == 0 else setups[::-1]  # alternate who goes first
        for system in order:
            result = results[system.name]
            if result.error:
                continue
            try:
                drain_once(runner, system, result)
                print(f"   {kind} {system.label}: {result.drain_rate:,.0f} jobs/s", flush=True)
            except BenchError as exc:
                result.error = str(exc)
                print(f"   {kind} {system.label}: {exc}", flush=True)
            finally:
                runner.redis.flushall()
    out = []
    for result in results.values():
        if result.drain_rates:
            result.drain_rate = statistics.median(result.drain_rates)
            result.cpu_us_per_job = statistics.median(result.cpu_us_per_job_runs)
            if len(result.drain_rates) > 1:
                low, high = min(result.drain_rates), max(result.drain_rates)
                result.notes.append(f"{kind}: median of {len(result.drain_rates)} drains ({low:,.0f} to {high:,.0f})")
        out.append({**result.to_json(), "cores_busy": result.cpu_us_per_job, "kind": kind})
    return out


# -- the report -------------------------------------------------------------------------------------------
def _rate(results: list[dict[str, Any]], name: str) -> float | None:
    found = next((r for r in results if r["system"] == name and not r.get("error")), None)
    return found["drain_rate"] if found else None


def _speedup(results: list[dict[str, Any]], name: str) -> str:
    family = name.rsplit("_", 1)[0]
    one = _rate(results, f"{family}_{'p' if family == 'kiq' else 'x'}1")
    this = _rate(results, name)
    if name.endswith("1") or not one or not this:
        return "1.00x" if name.endswith("1") and this else "-"
    return f"{this / one:.2f}x"


def table(run: dict[str, Any]) -> str:
    by_kind = {kind: [r for r in run["results"] if r["kind"] == kind] for kind in DRAINS}
    noop, cpu = by_kind["noop"], by_kind["cpu"]
    spin_ms = run["settings"]["spin_seconds"] * 1000
    headers = [
        "setup", "version", "processes x threads",
        "no-op drain (jobs/s, vs Sidekiq x1)", "no-op: 2 procs / 1",
        f"CPU-bound drain, {spin_ms:g} ms spin (jobs/s, vs Sidekiq x1)", "CPU-bound: 2 procs / 1",
        f"CPU-bound: ceiling (procs / {spin_ms:g} ms)", "CPU-bound: cores busy", "peak RSS (MiB, no-op / CPU)",
    ]  # fmt: skip
    rows = [headers, ["---"] * len(headers)]
    notes: list[str] = []
    base = {kind: _rate(results, BASELINE) for kind, results in by_kind.items()}
    for n, c in zip(noop, cpu, strict=True):
        processes = int(n["system"][-1])
        row = [n["label"], n.get("version") or c.get("version") or "?", n["concurrency"]]
        for result, kind in ((n, "noop"), (c, "cpu")):
            if result.get("error"):
                row += ["error", "-"]
                notes.append(f"{result['label']} ({kind}): {result['error']}")
                continue
            rate, b = result["drain_rate"], base[kind]
            row.append(f"{rate:,.0f}" + (f" ({rate / b:.2f}x)" if b else ""))
            row.append(_speedup(by_kind[kind], result["system"]))
            notes += [f"{result['label']}: {note}" for note in result.get("notes", [])]
        row.append(f"{processes / run['settings']['spin_seconds']:,.0f}")
        row.append(f"{c['cores_busy']:.2f}" if c.get("cores_busy") is not None else "-")
        rss = [f"{r['peak_rss_mib']:.0f}" if r.get("peak_rss_mib") else "-" for r in (n, c)]
        row.append(" / ".join(rss))
        rows.append(row)
    return render_table(rows, notes)


def markdown(run: dict[str, Any]) -> str:
    return f"{table(run)}\n{machine_lines(run)}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench --processes", description=__doc__)
    parser.add_argument("--processes", action="store_true", help="(the mode's switch in python -m bench)")
    parser.add_argument("--jobs", type=int, default=20_000, help="no-op jobs per drain (default 20,000)")
    parser.add_argument("--cpu-jobs", type=int, default=5_000, help="CPU-bound jobs per drain (default 5,000)")
    parser.add_argument("--spin-seconds", type=float, default=0.001, help="CPU each CPU-bound job spins")
    parser.add_argument("--drain-runs", type=int, default=2, help="rounds of drains, medians reported")
    parser.add_argument("--port", type=int, default=6392, help="port of the run's private redis-server")
    parser.add_argument("--max-drain-seconds", type=float, default=120.0)
    parser.add_argument("--kiq-python", default=str(ROOT / ".venv/bin/python"))
    parser.add_argument("--no-yjit", action="store_true", help="run Ruby Sidekiq without YJIT")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results")
    parser.add_argument("--stem", help="the saved files' name (default: bench-procs-DATE-TIME)")
    parser.add_argument("--report", type=Path, metavar="FILE.json", help="re-render a saved run; run nothing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        print(markdown(json.loads(args.report.read_text())))
        return 0
    server = RedisServer(args.port)
    server.start()
    try:
        yjit = not args.no_yjit and machine.yjit_available()
        tools = Toolchain(ROOT, server.url, args.kiq_python, args.kiq_python, "", "", yjit)
        os.environ["BENCH_SPIN_SECONDS"] = repr(args.spin_seconds)  # the workers' and pushers' environment
        run: dict[str, Any] = {
            "command": shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": machine.describe(args.kiq_python, args.kiq_python, server.version(), yjit),  # one Python
            "kind": "processes",
            "settings": {k: getattr(args, k) for k in ("jobs", "cpu_jobs", "spin_seconds", "drain_runs")},
            "results": [],
        }
        run["machine"].pop("python (peers)", None)  # no Python peers here
        for kind, jobs in (("noop", args.jobs), ("cpu", args.cpu_jobs)):
            print(f"== {kind} drain, {jobs:,} jobs", flush=True)
            settings = Settings(jobs, 0, 0, 100.0, args.max_drain_seconds, logs=args.out / "logs")
            settings.logs.mkdir(parents=True, exist_ok=True)
            run["results"] += run_kind(tools, settings, kind, max(1, args.drain_runs))
        run["machine"]["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    finally:
        server.stop()
    text = markdown(run)
    print()
    print(text)
    stem = args.stem or time.strftime("bench-procs-%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(run, indent=2) + "\n")
    (args.out / f"{stem}.md").write_text(text)
    print(f"wrote {args.out / stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
