"""``python -m bench.latency`` (``make bench``'s ``latency`` part): latency and cost per job at the loads production
runs, every system fed by one pusher.

One cheap pusher for every system, in this process: raw pipelined ``LPUSH``es of Sidekiq-format payloads on a fixed
schedule (every millisecond, the jobs due by then in one command), at 20 (the multi-queue rows), 1,000, 3,000 and
6,000 jobs/s; so no system's own client, nor its pushing process on the same cores, is what is measured. Each job
records its latency (perform start - push time) in a local file, with no Redis call (bench/systems/latency_jobs.py
and sidekiq_latency.rb). Per rate: the rate reached, p50/p99, and the worker's and Redis's CPU per job (Redis's
includes the pushes, the same for every system), and the context switches of the worker's threads per job (a
thread woken to run a job, or to take over a wait, is one). The multi-queue rows spread the pushes over two or three
queues that the worker serves in strict order (kiq reliable blocks on several queues there, where it slept before).
Each system has its own redis-server; the systems run one after the other, so compare them as ratios in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import procs
from bench.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
RATES = (1000.0, 3000.0, 6000.0)
MULTI_RATES = (20.0, 1000.0, 3000.0, 6000.0)
QUEUES_2 = ("critical", "default")
QUEUES_3 = ("critical", "default", "low")
TICK = 0.001  # the pusher sends what is due every millisecond
JOB_CLASS = "BenchFileLatency"


@dataclass(frozen=True)
class Setup:
    name: str
    label: str
    queues: tuple[str, ...]
    fetch: str = ""  # kiq: "basic" or "reliable"; "" for Sidekiq

    def command(self, kiq_python: str) -> list[str]:
        queue_args = [word for queue in self.queues for word in ("-q", queue)]
        if not self.fetch:
            return ["sidekiq", "-r", str(ROOT / "bench/systems/sidekiq_latency.rb"), "-c", "10", *queue_args]
        return [kiq_python, "-m", "kiq.cli", "worker", "-r", "bench.systems.latency_jobs", "-c", "10",
                "--fetch", self.fetch, *queue_args]  # fmt: skip


SETUPS = [
    Setup("kiq_basic", "kiq basic", ("default",), "basic"),
    Setup("kiq_reliable", "kiq reliable", ("default",), "reliable"),
    Setup("sidekiq", "Sidekiq (Ruby)", ("default",)),
    Setup("kiq_reliable_2q", "kiq reliable, 2 queues", QUEUES_2, "reliable"),
    Setup("kiq_reliable_3q", "kiq reliable, 3 queues", QUEUES_3, "reliable"),
    Setup("kiq_basic_3q", "kiq basic, 3 queues", QUEUES_3, "basic"),
    Setup("sidekiq_3q", "Sidekiq (Ruby), 3 queues", QUEUES_3),
]


@dataclass
class Row:
    system: str
    label: str
    rate: float
    reached: float = 0.0  # jobs/s the pusher sent
    jobs: int = 0
    ran: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    worker_us: float | None = None  # worker CPU per job
    redis_us: float | None = None  # Redis CPU per job (the pushes included)
    switches: float | None = None  # context switches of the worker's threads per job (a thread woken is one)
    notes: list[str] = field(default_factory=list)


class RawPusher:
    """LPUSH on a raw socket, RESP encoded by hand: the cheapest pusher there is, the same for every system."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.pending = 0  # replies not read yet

    def push(self, queue: str, count: int) -> None:
        now = time.time()
        words = [b"LPUSH", f"queue:{queue}".encode()]
        for _ in range(count):
            payload = {"class": JOB_CLASS, "args": [now], "jid": uuid.uuid4().hex[:24], "queue": queue,
                       "retry": False, "created_at": now, "enqueued_at": now}  # fmt: skip
            words.append(json.dumps(payload, separators=(",", ":")).encode())
        self.sock.sendall(b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(word), word) for word in words))
        self.pending += 1

    def drain_replies(self) -> None:
        """Read the pending replies (":n\\r\\n" each), so the socket buffers never fill."""
        self.sock.setblocking(False)
        try:
            while self.pending:
                data = self.sock.recv(65536)
                self.pending -= data.count(b"\r\n")
        except BlockingIOError:
            pass
        finally:
            self.sock.setblocking(True)

    def close(self) -> None:
        self.sock.close()


def run_rate(pusher: RawPusher, queues: tuple[str, ...], rate: float, seconds: float) -> tuple[int, float]:
    """Push at ``rate`` for ``seconds`` (round robin over ``queues``); returns (jobs, seconds taken)."""
    total = int(rate * seconds)
    sent = 0
    turn = 0
    start = time.perf_counter()
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        if due > sent:
            per_queue = [0] * len(queues)
            for _ in range(due - sent):
                per_queue[turn % len(queues)] += 1
                turn += 1
            for queue, count in zip(queues, per_queue, strict=True):
                if count:
                    pusher.push(queue, count)
            sent = due
            pusher.drain_replies()
        next_at = start + sent / rate
        delay = max(0.0, min(TICK, next_at - time.perf_counter()))
        if delay:
            time.sleep(delay)
    return total, time.perf_counter() - start


def redis_cpu(server: RedisServer) -> float:
    info = server.client().info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def lines(path: Path, offset: int) -> tuple[list[float], int]:
    data = path.read_bytes() if path.exists() else b""
    return [float(line) for line in data[offset:].split()], len(data)


def measure(setup: Setup, args: argparse.Namespace, port: int, work: Path) -> list[Row]:
    rates = MULTI_RATES if len(setup.queues) > 1 else RATES
    rows = [Row(setup.name, setup.label, rate) for rate in rates]
    server = RedisServer(port)
    server.start()
    out = work / f"latency-{setup.name}.txt"
    out.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": server.url, "KIQ_REDIS_URL": server.url,
           "KIQ_LOG_LEVEL": "WARNING", "BENCH_LATENCY_FILE": str(out), "KIQ_PLUGINS": "reliable_fetch"}  # fmt: skip
    if args.yjit and not setup.fetch:
        env["RUBYOPT"] = "--yjit"
    log = (work / f"latency-{setup.name}.log").open("w")
    worker = subprocess.Popen(setup.command(args.kiq_python), cwd=ROOT, env=env, stdout=log, stderr=log,
                              stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    pusher = RawPusher(port)
    try:
        offset = warm_up(pusher, setup, out, worker)
        for row in rows:
            seconds = args.seconds if row.rate >= 1000 else max(args.seconds, 5.0)
            worker_before, redis_before = procs.cpu_seconds(worker.pid), redis_cpu(server)
            switches_before = procs.context_switches(worker.pid)
            row.jobs, took = run_rate(pusher, setup.queues, row.rate, seconds)
            row.reached = row.jobs / took
            deadline = time.monotonic() + 30
            values, end = lines(out, offset)
            while len(values) < row.jobs and time.monotonic() < deadline:
                time.sleep(0.05)
                pusher.drain_replies()
                values, end = lines(out, offset)
            row.worker_us = (procs.cpu_seconds(worker.pid) - worker_before) / row.jobs * 1e6
            row.redis_us = (redis_cpu(server) - redis_before) / row.jobs * 1e6
            row.switches = (procs.context_switches(worker.pid) - switches_before) / row.jobs
            offset, row.ran = end, len(values)
            if values:
                values.sort()
                row.p50_ms = values[len(values) // 2] * 1000
                row.p99_ms = values[min(len(values) - 1, int(len(values) * 0.99))] * 1000
            if row.ran < row.jobs:
                row.notes.append(f"{row.ran} of {row.jobs} ran within 30 s")
            if row.reached < 0.95 * row.rate:
                row.notes.append(f"the pusher reached {row.reached:,.0f}/s")
            time.sleep(0.5)  # idle between rates
    except Exception as exc:  # a system that fails is reported as such; the others still run
        for row in rows:
            if row.ran == 0:
                row.notes.append(f"failed: {exc}")
    finally:
        pusher.close()
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        log.close()
        server.stop()
    return rows


def warm_up(pusher: RawPusher, setup: Setup, out: Path, worker: subprocess.Popen[bytes]) -> int:
    """Jobs until the worker runs them (it has started); returns the file offset after them."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited with {worker.returncode}")
        for queue in setup.queues:
            pusher.push(queue, 1)
        time.sleep(0.2)
        pusher.drain_replies()
        values, _ = lines(out, 0)
        if len(values) >= 5 * len(setup.queues):
            run_rate(pusher, setup.queues, 500.0, 1.0)  # warm the fetch path at a rate
            time.sleep(1.0)
            return lines(out, 0)[1]
    raise RuntimeError("the worker ran no job within 60 s")


def sidekiq_available() -> bool:
    try:
        return subprocess.run(["ruby", "-e", 'require "sidekiq"'], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    """The part's table and issue 43's targets, from its JSON result."""
    out = [f"One raw pipelined pusher for every system, {result['seconds_per_rate']:g} s per rate; "
           f"{result['machine']}.", "",
           "| system | rate asked | reached | p50 ms | p99 ms | worker CPU µs/job | Redis CPU µs/job "
           "| worker context switches/job | notes |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for row in result["rows"]:
        out.append(f"| {row['label']} | {row['rate']:,.0f} | {row['reached']:,.0f} | {_number(row['p50_ms'])} | "
                   f"{_number(row['p99_ms'])} | {_number(row['worker_us'], 0)} | {_number(row['redis_us'], 0)} | "
                   f"{_number(row.get('switches'), 1)} | {'; '.join(row['notes'])} |")  # fmt: skip
    checks = targets(result["rows"])
    if checks:
        out += ["", "| target (issue 43) | measured | result |", "|---|---|---|"]
        out += [f"| {what} | {measured} | {met} |" for what, measured, met in checks]
    return "\n".join(out) + "\n"


def targets(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """Issue 43's targets at the loads production runs, each measured value with met / not met."""
    at = {(row["system"], row["rate"]): row for row in rows}
    checks: list[tuple[str, str, str]] = []

    def ratio(system: str, key: str, limit: float, what: str) -> None:
        mine, theirs = at.get((system, 1000.0), {}).get(key), at.get(("sidekiq", 1000.0), {}).get(key)
        if mine and theirs:
            checks.append(
                (what, f"{mine / theirs:.2f}x ({mine:,.0f} / {theirs:,.0f} µs)", _met(mine / theirs <= limit))
            )

    ratio("kiq_basic", "worker_us", 1.0, "1,000/s: worker CPU per job, basic ≤ 1.0x Sidekiq's")
    ratio("kiq_reliable", "worker_us", 1.2, "1,000/s: worker CPU per job, reliable ≤ 1.2x Sidekiq's")
    ratio("kiq_basic", "redis_us", 1.0, "1,000/s: Redis CPU per job, basic ≤ 1.0x Sidekiq's")
    ratio("kiq_reliable", "redis_us", 1.3, "1,000/s: Redis CPU per job, reliable ≤ 1.3x Sidekiq's")
    for system in ("kiq_basic", "kiq_reliable"):
        for rate in RATES:
            mine, theirs = at.get((system, rate), {}).get("p99_ms"), at.get(("sidekiq", rate), {}).get("p99_ms")
            if mine is not None and theirs is not None:
                checks.append((f"{rate:,.0f}/s: p99 {system} ≤ Sidekiq's", f"{mine:,.2f} / {theirs:,.2f} ms",
                               _met(mine <= theirs)))  # fmt: skip
    for count in (2, 3):
        for rate in (20.0, 1000.0):
            p99 = at.get((f"kiq_reliable_{count}q", rate), {}).get("p99_ms")
            if p99 is not None:
                what = f"reliable over {count} queues, {rate:,.0f}/s: p99 ≤ 2 ms"
                checks.append((what, f"{p99:,.2f} ms", _met(p99 <= 2.0)))
    return checks


def _met(met: bool) -> str:
    return "met" if met else "**not met**"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 s per rate instead of 10")
    parser.add_argument("--seconds", type=float, help="seconds per rate")
    parser.add_argument("--port", type=int, default=6420)
    parser.add_argument("--kiq-python", default=str(ROOT / ".venv/bin/python"))
    parser.add_argument("--systems", help=f"comma-separated, of: {', '.join(setup.name for setup in SETUPS)}")
    parser.add_argument("--no-yjit", dest="yjit", action="store_false")
    parser.add_argument("--no-pin", action="store_true", help="accepted for bench.all; nothing is pinned here")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.seconds = args.seconds or (2.0 if args.quick else 10.0)
    work = args.out or Path(tempfile.mkdtemp(prefix="kiq-bench-latency-"))
    work.mkdir(parents=True, exist_ok=True)
    wanted = set(args.systems.split(",")) if args.systems else None
    rows: list[Row] = []
    ruby = sidekiq_available()
    for setup in SETUPS:
        if wanted is not None and setup.name not in wanted:
            continue
        if not setup.fetch and not ruby:
            print(f"{setup.label}: skipped, Ruby Sidekiq is not installed (apt-get install ruby-sidekiq)", flush=True)
            continue
        rates = MULTI_RATES if len(setup.queues) > 1 else RATES
        print(f"{setup.label}: rates {', '.join(f'{rate:,.0f}' for rate in rates)}/s", flush=True)
        rows += measure(setup, args, args.port, work)
    machine = f"{os.cpu_count()} CPUs ({os.uname().machine}), load average {os.getloadavg()[0]:.1f} at the end"
    result: dict[str, Any] = {"machine": machine, "seconds_per_rate": args.seconds, "rows": [asdict(r) for r in rows]}
    print("\n" + markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
