"""Runs one system through the benchmark's phases on the run's private Redis and times it from outside.

Per system: FLUSHALL → push ``single_jobs`` one by one (timed by the pusher around its push loop; ``single_runs``
times, FLUSHALL before each, the median reported) → FLUSHALL →
push ``jobs`` with the bulk API (timed likewise; this pre-fills the queue) → start the worker → drain: the
harness polls the queue's length every ~2 ms; the clock starts at the first poll that sees fewer than
``jobs`` (the first job taken) and stops at the first that sees 0 → peak RSS of the worker's process tree →
latency: ``latency_jobs`` at ``latency_rate``/s, each job records (perform start - push time) → latency under
load: latency jobs at a steady ``load_rate``/s for ``load_seconds`` (one pusher process on a fixed schedule; the
rate it achieved is kept, and noted when short of the rate asked), only for a system whose drain rate in this run
is at least ``LOAD_HEADROOM`` x ``load_rate`` (a slower one would only measure its backlog) → the keys where
failed jobs would land must be empty and the worker's log free of tracebacks → stop the worker (SIGTERM to its
process group, SIGKILL after ``stop_timeout``, 30 s by default).

The I/O-bound drain (``Settings.io``, ``python -m bench --io``): FLUSHALL → push ``jobs`` async jobs that each
await ``io_seconds`` with the bulk API → start the worker → the clock starts at the first poll that sees a job
taken (the queue shorter, or a job counted started: arq leaves a job in its queue until it ends) and stops at the
first that sees all ``jobs`` counted finished (bench/systems/io_done.py: a system's queue is empty up to a
prefetch and a job's duration before its last job ends) → peak RSS and the worker's CPU time over the drain →
failures checked as above → stop the worker. No single pushes and no latency phase: it measures throughput.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench import procs
from bench.systems import System, Toolchain
from bench.systems.common import LATENCY_KEY
from bench.systems.io_done import FINISHED_KEY, STARTED_KEY

POLL = 0.002  # seconds between queue-length polls while draining
RSS_EVERY = 0.25  # seconds between RSS samples
BOOT_TIMEOUT = 60.0
SLOW_DRAIN_SECONDS = 30.0  # a drain longer than this is not repeated
STOP_TIMEOUT = 30.0
LOAD_HEADROOM = 2.0  # the latency-under-load phase runs for systems that drain at least this x the load rate
LOAD_SHORT = 0.95  # a pusher below this share of the load rate asked is noted as not sustaining it


@dataclass
class Settings:
    jobs: int
    single_jobs: int
    latency_jobs: int
    latency_rate: float
    max_drain_seconds: float
    logs: Path
    drain_runs: int = 3  # drains per system; the median is reported (noise on a shared machine is large)
    io: bool = False  # the I/O-bound drain instead of the no-op one
    io_seconds: float = 0.05  # what each I/O job awaits
    load_rate: float = 5000.0  # latency under load: latency jobs pushed per second, steadily (0: no such phase)
    load_seconds: float = 5.0  # ... for this long
    single_runs: int = 3  # single pushes (of single_jobs each) per system; the median is reported
    stop_timeout: float = STOP_TIMEOUT  # seconds a stopping worker gets before SIGKILL (after everything is measured)


@dataclass
class Result:
    system: str
    label: str
    concurrency: str
    version: str = ""
    jobs: int = 0
    drained: int = 0  # jobs taken while the clock ran (== jobs unless the drain hit max_drain_seconds)
    drain_seconds: float | None = None
    drain_rate: float | None = None
    drain_rates: list[float] = field(default_factory=list)  # every drain's rate; drain_rate is their median
    settled_rate: float | None = None  # jobs / (first taken → all side effects stored), for systems with settle
    settled_rates: list[float] = field(default_factory=list)  # per drain; settled_rate is their median
    push_single_rate: float | None = None
    push_single_rates: list[float] = field(default_factory=list)  # every run's; push_single_rate is their median
    push_bulk_rate: float | None = None
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_count: int = 0
    load_p50_ms: float | None = None  # latency under a steady load of Settings.load_rate jobs/s
    load_p99_ms: float | None = None
    load_count: int = 0  # latency jobs of that phase that ran
    load_rate_achieved: float | None = None  # jobs/s the pusher sustained (jobs / its push loop's time)
    peak_rss_mib: float | None = None
    in_flight: int | None = None  # the I/O drain: jobs the worker may await at once
    cpu_us_per_job: float | None = None  # the I/O drain: the worker's CPU time (user + sys) over the drain / jobs
    cpu_us_per_job_runs: list[float] = field(default_factory=list)  # per drain; cpu_us_per_job is their median
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class BenchError(Exception):
    pass


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted ``values``."""
    index = max(0, min(len(values) - 1, round(fraction * len(values) + 0.5) - 1))
    return values[index]


class Runner:
    def __init__(self, tools: Toolchain, settings: Settings) -> None:
        self.tools = tools
        self.settings = settings
        self.redis = redis.Redis.from_url(tools.redis_url, decode_responses=True)

    def environment(self, system: System) -> dict[str, str]:
        # nothing of the caller's kiq/Redis settings may leak into a measured process
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KIQ_", "REDIS_", "RUBYOPT"))}
        env.update(PYTHONPATH=str(self.tools.root), BENCH_REDIS_URL=self.tools.redis_url, **system.env(self.tools))
        env["BENCH_IO_SECONDS"] = repr(self.settings.io_seconds)  # what the I/O drain's jobs await
        return env

    def run(self, system: System) -> Result:
        concurrency = system.concurrency.replace("{n}", f"{self.tools.io_concurrency:,}")
        result = Result(system.name, system.label, concurrency, jobs=self.settings.jobs)
        self.settings.logs.mkdir(parents=True, exist_ok=True)
        try:
            if self.settings.io:
                result.in_flight = system.in_flight or self.tools.io_concurrency
                self._run_io(system, result)
            else:
                self._run(system, result)
        except BenchError as exc:
            result.error = str(exc)
        finally:
            self.redis.flushall()
        return result

    def _reset(self, system: System) -> None:
        """An empty Redis, and the system's own store (the tracking schema) emptied by its setup."""
        self.redis.flushall()
        if system.setup is not None:
            self._check_call(system, system.setup(self.tools), "setup")

    def _fill(self, system: System, result: Result, bulk_rates: list[float], first: bool) -> str:
        """An empty Redis, then the queue filled by the system's bulk push (its rate noted); the system's version."""
        settings = self.settings
        self._reset(system)
        bulk = self.push(system, "bulk", settings.jobs)
        bulk_rates.append(settings.jobs / bulk["seconds"])
        if first and bulk["note"]:
            result.notes.append(bulk["note"])
        queued = self.queue_length(system)
        if queued != settings.jobs:
            raise BenchError(f"after the bulk push {system.queue_key} holds {queued} jobs, not {settings.jobs}")
        return str(bulk["version"])

    def _run(self, system: System, result: Result) -> None:
        settings = self.settings
        for _ in range(max(1, settings.single_runs)):  # a short loop in a fresh process: noisy, so repeated
            self._reset(system)
            single = self.push(system, "single", settings.single_jobs)
            result.version = single["version"]
            result.push_single_rates.append(settings.single_jobs / single["seconds"])
        result.push_single_rate = statistics.median(result.push_single_rates)
        if len(result.push_single_rates) > 1:
            low, high = min(result.push_single_rates), max(result.push_single_rates)
            runs = len(result.push_single_rates)
            result.notes.append(f"push single: median of {runs} runs ({low:,.0f} to {high:,.0f} jobs/s)")
        bulk_rates: list[float] = []  # the bulk push that fills the queue runs before every drain
        for run in range(settings.drain_runs):
            last = run == settings.drain_runs - 1
            self._fill(system, result, bulk_rates, first=run == 0)
            log_path = settings.logs / f"{system.name}.log"
            worker = self.start_worker(system, log_path)
            try:
                self.drain(system, worker, result, log_path)
                assert result.drain_rate is not None and result.drain_seconds is not None
                result.drain_rates.append(result.drain_rate)
                # a slow system's drain is long enough to be steady: once is enough (and saves minutes)
                last = last or result.drain_seconds > SLOW_DRAIN_SECONDS
                if last:
                    self.latency(system, worker, result, log_path)
                    self.load_latency(system, worker, result, log_path)
                self.check_failures(system, log_path)
            finally:
                self.stop(worker)
            if last:
                break
        self._medians(system, result, bulk_rates)

    def _medians(self, system: System, result: Result, bulk_rates: list[float]) -> None:
        settings = self.settings
        result.drain_rate = statistics.median(result.drain_rates)
        result.push_bulk_rate = statistics.median(bulk_rates)
        if result.cpu_us_per_job_runs:
            result.cpu_us_per_job = statistics.median(result.cpu_us_per_job_runs)
        if result.settled_rates:
            result.settled_rate = statistics.median(result.settled_rates)
            result.notes.append(
                f"all {settings.jobs:,} jobs {system.settled} at {result.settled_rate:,.0f} jobs/s "
                "(timed from the first job taken; median)"
            )
        if len(result.drain_rates) > 1:
            low, high = min(result.drain_rates), max(result.drain_rates)
            runs = len(result.drain_rates)
            result.notes.append(f"drain and push bulk: medians of {runs} runs (drain {low:,.0f} to {high:,.0f} jobs/s)")

    def _run_io(self, system: System, result: Result) -> None:
        """The I/O-bound drain: a bulk push, then the drain timed to the last job finished, ``drain_runs`` times."""
        settings = self.settings
        bulk_rates: list[float] = []
        for run in range(settings.drain_runs):
            result.version = self._fill(system, result, bulk_rates, first=run == 0)
            log_path = settings.logs / f"{system.name}.log"
            worker = self.start_worker(system, log_path)
            try:
                self.io_drain(system, worker, result, log_path)
                self.check_failures(system, log_path)
            finally:
                self.stop(worker)
        self._medians(system, result, bulk_rates)

    # -- phases ---------------------------------------------------------------------------------------
    def start_worker(self, system: System, log_path: Path) -> subprocess.Popen[bytes]:
        with log_path.open("wb") as log:  # the child keeps its own descriptor
            return subprocess.Popen(
                system.worker(self.tools), cwd=self.tools.root, env=self.environment(system),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def push(self, system: System, mode: str, count: int, rate: float | None = None) -> dict[str, Any]:
        rate = self.settings.latency_rate if rate is None else rate
        args = [*system.pusher(self.tools), mode, str(count), "--rate", str(rate)]
        output = self._check_call(system, args, f"push {mode}", cpus=self.tools.pusher_cpus)
        try:
            report: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise BenchError(f"push {mode}: no result line in the pusher's output: {output[-500:]!r}") from None
        return report

    def drain(self, system: System, worker: subprocess.Popen[bytes], result: Result, log: Path) -> None:
        settle = self._start_settle(system)
        try:
            started, started_wall = self._wait_first_taken(system, worker, log)
            self._clock_drain(system, worker, result, log, started)
            if settle is not None:
                self._settled(settle, result, started_wall)
        finally:
            if settle is not None and settle.poll() is None:
                settle.kill()
                settle.wait()

    def _wait_first_taken(
        self,
        system: System,
        worker: subprocess.Popen[bytes],
        log: Path,
        started: Callable[[], bool] | None = None,
        timeout: float = BOOT_TIMEOUT,
    ) -> tuple[float, float]:
        """Poll until the queue is shorter than it was filled (or ``started()``): (perf_counter, epoch) of that
        poll."""
        boot_deadline = time.monotonic() + timeout
        while True:
            polled_at, polled_wall = time.perf_counter(), time.time()
            if self.queue_length(system) < self.settings.jobs or (started is not None and started()):
                return polled_at, polled_wall
            if worker.poll() is not None:
                raise BenchError(f"the worker exited with {worker.returncode} before taking a job: {_tail(log)}")
            if time.monotonic() > boot_deadline:
                raise BenchError(f"the worker took no job within {timeout:.0f} s: {_tail(log)}")
            time.sleep(POLL / 2)  # finer while waiting for the first job: its time starts the clock

    def _clock_drain(
        self,
        system: System,
        worker: subprocess.Popen[bytes],
        result: Result,
        log: Path,
        started: float,
        left: Callable[[], int] | None = None,
    ) -> None:
        """Poll until ``left()`` (default: the queue's length) is 0; the drain's time, rate and peak RSS."""
        peak_rss = procs.rss_kib(worker.pid)
        next_rss = started + RSS_EVERY
        while True:
            now = time.perf_counter()
            remaining = self.queue_length(system) if left is None else left()
            if remaining == 0:
                break
            if now - started > self.settings.max_drain_seconds:
                result.notes.append(f"drain stopped after {self.settings.max_drain_seconds:.0f} s")
                break
            if worker.poll() is not None:
                raise BenchError(f"the worker exited with {worker.returncode} while draining: {_tail(log)}")
            if now >= next_rss:
                peak_rss = max(peak_rss, procs.rss_kib(worker.pid))
                next_rss = now + RSS_EVERY
            time.sleep(POLL)
        result.drain_seconds = now - started
        result.drained = self.settings.jobs - remaining
        if remaining:  # a cut drain leaves a backlog; the latency phase needs an idle worker
            self.redis.delete(system.queue_key)
        result.drain_rate = result.drained / result.drain_seconds
        peak_mib = max(peak_rss, procs.peak_rss_kib(worker.pid)) / 1024
        result.peak_rss_mib = max(result.peak_rss_mib or 0.0, peak_mib)  # the largest over repeated drains

    def io_drain(self, system: System, worker: subprocess.Popen[bytes], result: Result, log: Path) -> None:
        """From the first job taken or started to the last one finished, by the jobs' own counters."""
        started, _ = self._wait_first_taken(system, worker, log, started=lambda: self._counter(STARTED_KEY) > 0)
        cpu_before = procs.cpu_seconds(worker.pid)

        def unfinished() -> int:
            return max(0, self.settings.jobs - self._counter(FINISHED_KEY))

        self._clock_drain(system, worker, result, log, started, left=unfinished)
        cpu = procs.cpu_seconds(worker.pid) - cpu_before
        assert result.drain_rate is not None
        result.drain_rates.append(result.drain_rate)
        if result.drained:
            result.cpu_us_per_job_runs.append(cpu / result.drained * 1e6)

    def _counter(self, key: str) -> int:
        return int(self.redis.get(key) or 0)

    def _start_settle(self, system: System) -> subprocess.Popen[str] | None:
        if system.settle is None:
            return None
        args = [*system.settle(self.tools), str(self.settings.jobs), str(self.settings.max_drain_seconds)]
        return subprocess.Popen(
            args, cwd=self.tools.root, env=self.environment(system), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    def _settled(self, settle: subprocess.Popen[str], result: Result, started_wall: float) -> None:
        """The drain timed to the last side effect written (the tracking database's rows)."""
        output, _ = settle.communicate("go\n", timeout=self.settings.max_drain_seconds + 60)
        if settle.returncode != 0:
            raise BenchError(f"settle failed ({settle.returncode}); its error is above")
        settled = json.loads(output.strip().splitlines()[-1])
        result.settled_rates.append(min(result.drained, settled["finished"]) / (settled["at"] - started_wall))

    def latency(self, system: System, worker: subprocess.Popen[bytes], result: Result, log: Path) -> None:
        count = self.settings.latency_jobs
        self.redis.delete(LATENCY_KEY)
        self.push(system, "latency", count)
        deadline = time.monotonic() + 30
        while self.redis.llen(LATENCY_KEY) < count and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.05)
        values = sorted(float(v) * 1000 for v in self.redis.lrange(LATENCY_KEY, 0, -1))
        result.latency_count = len(values)
        if len(values) < count:
            result.notes.append(f"latency: {len(values)} of {count} jobs ran within 30 s")
        if values:
            result.latency_p50_ms = percentile(values, 0.50)
            result.latency_p99_ms = percentile(values, 0.99)

    def load_latency(self, system: System, worker: subprocess.Popen[bytes], result: Result, log: Path) -> None:
        """Latency jobs at a steady ``load_rate`` for ``load_seconds`` while the worker runs: push → perform under
        load, every job of the load measured."""
        rate, seconds = self.settings.load_rate, self.settings.load_seconds
        if rate <= 0 or seconds <= 0:
            return
        drain = statistics.median(result.drain_rates) if result.drain_rates else 0.0
        if drain < LOAD_HEADROOM * rate:
            result.notes.append(
                f"latency at {rate:,.0f}/s not run: drains below {LOAD_HEADROOM:g}x the load ({drain:,.0f} jobs/s)"
            )
            return
        count = max(1, round(rate * seconds))
        self.redis.delete(LATENCY_KEY)
        pushed = self.push(system, "latency", count, rate)
        result.load_rate_achieved = count / pushed["seconds"]
        deadline = time.monotonic() + 30
        while self.redis.llen(LATENCY_KEY) < count and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.05)
        values = sorted(float(v) * 1000 for v in self.redis.lrange(LATENCY_KEY, 0, -1))
        self.redis.delete(LATENCY_KEY)
        result.load_count = len(values)
        if result.load_rate_achieved < LOAD_SHORT * rate:
            result.notes.append(
                f"latency under load: one pusher process sustained only {result.load_rate_achieved:,.0f} of the "
                f"{rate:,.0f} jobs/s asked; its latency columns are at that rate"
            )
        if len(values) < count:
            result.notes.append(f"latency under load: {len(values):,} of {count:,} jobs ran within 30 s of the push")
        if values:
            result.load_p50_ms = percentile(values, 0.50)
            result.load_p99_ms = percentile(values, 0.99)

    def check_failures(self, system: System, log: Path) -> None:
        """A drain only counts if the jobs ran: failed jobs would be in the failure keys or, as a traceback,
        in the log (workers log at WARNING, so any traceback there is a failure)."""
        self.check_failed_jobs(system, log)
        if "Traceback (most recent call last)" in log.read_text(errors="replace"):
            raise BenchError(f"the worker logged a traceback: {_tail(log)}")

    def check_failed_jobs(self, system: System, log: Path) -> None:
        """No job in the keys where failed jobs land."""
        time.sleep(0.5)  # a failure is recorded just after the job; let the last ones land
        failed = {key: self.size(key) for key in system.failure_keys}
        failed = {key: size for key, size in failed.items() if size}
        if failed:
            raise BenchError(f"jobs failed: {failed}; see {log}")

    def stop(self, worker: subprocess.Popen[bytes]) -> None:
        if worker.poll() is not None:
            return
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(self.settings.stop_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()

    # -- helpers --------------------------------------------------------------------------------------
    def queue_length(self, system: System) -> int:
        if system.queue_is_zset:
            return int(self.redis.zcard(system.queue_key))
        return int(self.redis.llen(system.queue_key))

    def size(self, key: str) -> int:
        kind = str(self.redis.type(key))
        if kind == "list":
            return int(self.redis.llen(key))
        if kind == "zset":
            return int(self.redis.zcard(key))
        if kind == "none":
            return 0
        raise BenchError(f"{key} is a {kind}; the harness counts lists and sorted sets")

    def _check_call(self, system: System, args: list[str], what: str, cpus: frozenset[int] | None = None) -> str:
        done = subprocess.run(
            args, cwd=self.tools.root, env=self.environment(system), capture_output=True, text=True, timeout=1800,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )  # fmt: skip
        if done.returncode != 0:
            raise BenchError(f"{what} failed ({done.returncode}): {done.stderr[-1500:]}")
        return done.stdout


def _tail(log: Path, chars: int = 1500) -> str:
    return log.read_text(errors="replace")[-chars:]
