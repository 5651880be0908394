"""The soak (`make soak`, ``python -m bench.soak --minutes N``; issue 42): kiq under a mixed load and faults for N
minutes (``SOAK_MINUTES``, 60 for the real run), then every job accounted for.

- Redis: a redis-server of its own on a free port, with an append-only file, so that a restart keeps the data (a
  graceful SHUTDOWN writes it out).
- Workers: ``kiq worker -p 2 --fetch reliable`` with the workflow plugin, serving ``default``, ``async`` and
  ``walks`` (bench/soak_jobs.py).
- Load: one pusher thread, ``--rate`` pushes a second: sync jobs, async jobs, workflows (a chain holding a chord:
  ``a | group(b, c) | d``) and iterable jobs of 20 items, with reliable push on.
- Faults, at intervals scaled to the length (the issue's at 60 minutes): a Redis restart every 10 minutes (down for
  5 s), a ``kill -9`` of one worker child every 5 minutes (offset from the restarts), one ``maxmemory`` episode
  (every write refused with OOM) of one minute in the middle.
- Samples every minute (scaled, at least every 10 s): the worker tree's RSS, open descriptors and threads, Redis's
  used memory, the queues' lengths.
- At the end the pusher stops, the soak waits for the workers to finish what was pushed, stops them, and writes
  bench/results/soak-<time>.{json,md,png} (bench/soak_report.py): pushed / done / lost / duplicates per kind, the
  slopes of the samples after the warm-up, latency p99 per window.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

import kiq
from bench import procs, soak_report
from bench.redis_server import RedisServer
from bench.soak_jobs import SoakAsync, SoakStep, SoakSync, SoakWalk
from kiq.plugins.workflow import chain, group

RESULTS = Path(__file__).parent / "results"
WALK_ITEMS = 20
KINDS = (("sync", 0.6), ("async", 0.25), ("workflow", 0.1), ("walk", 0.05))  # what a push is, and how often


@dataclass
class Plan:
    """The soak's schedule in seconds from its start, the issue's intervals scaled to its length."""

    seconds: float
    restart_every: float
    restart_down: float
    kill_every: float
    maxmemory_at: float
    maxmemory_for: float
    sample_every: float
    window: float  # latency p99 per window

    @classmethod
    def scaled(cls, minutes: float) -> Plan:
        scale = minutes / 60
        return cls(
            seconds=minutes * 60,
            restart_every=max(30.0, 600 * scale),
            restart_down=5.0,
            kill_every=max(15.0, 300 * scale),
            maxmemory_at=minutes * 60 * 0.45,
            maxmemory_for=max(10.0, 60 * scale),
            sample_every=max(10.0, 60 * scale),
            window=max(30.0, 600 * scale),
        )


@dataclass
class Ledger:
    """What the pusher pushed (label -> kind and push time), what it could not push, and the faults done."""

    pushed: dict[str, tuple[str, float]] = field(default_factory=dict)
    uncertain: list[str] = field(default_factory=list)  # a push that raised: it may or may not have landed
    push_errors: dict[str, int] = field(default_factory=dict)
    faults: list[tuple[float, str]] = field(default_factory=list)
    samples: list[dict[str, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Soak:
    def __init__(self, minutes: float, rate: float, workdir: Path) -> None:
        self.plan = Plan.scaled(minutes)
        self.rate = rate
        self.workdir = workdir
        self.ledger = Ledger()
        self.stop_pushing = threading.Event()
        self.finished = threading.Event()
        self.redis = RedisServer(free_port(), options=("--appendonly", "yes", "--appendfsync", "everysec"))
        self.worker: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    # -- the processes -------------------------------------------------------------------------------------------
    def start_worker(self) -> None:
        toml = self.workdir / "kiq.toml"
        toml.write_text(
            f'redis_url = "{self.redis.url}"\nplugins = ["workflow"]\nfetch = "reliable"\n'
            'queues = ["default", "async", "walks"]\nconcurrency = 10\ntimeout = 10\n'
            "reliable_max_interrupts = 1000\n"
        )
        env = {**os.environ, "KIQ_SOAK_DIR": str(self.workdir)}
        log = open(self.workdir / "worker.log", "wb")  # noqa: SIM115 - the worker's for its whole life
        command = [sys.executable, "-m", "kiq", "worker", "-C", str(toml), "-r", "bench.soak_jobs", "-p", "2"]
        self.worker = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=Path.cwd())

    def restart_redis(self) -> None:
        """SHUTDOWN (the append-only file written out), down for a few seconds, then up on the same port and data."""
        self.note("redis restart")
        self.redis.restart(self.plan.restart_down)
        self.note("redis up")

    def kill_worker_child(self) -> None:
        assert self.worker is not None
        children = [pid for pid in procs.tree(self.worker.pid) if pid != self.worker.pid]
        if children:
            victim = random.choice(children)
            self.note(f"kill -9 worker child {victim}")
            os.kill(victim, signal.SIGKILL)

    def maxmemory_episode(self) -> None:
        client = self.redis.client()
        used = int(client.info("memory")["used_memory"])
        self.note(f"maxmemory {used} (every write refused) for {self.plan.maxmemory_for:.0f} s")
        client.config_set("maxmemory", used)
        time.sleep(self.plan.maxmemory_for)
        client.config_set("maxmemory", 0)
        self.note("maxmemory 0")

    def note(self, what: str) -> None:
        at = time.monotonic() - self.started
        with self.ledger.lock:
            self.ledger.faults.append((round(at, 1), what))
        print(f"[soak {at:7.1f} s] {what}", flush=True)

    # -- the threads ---------------------------------------------------------------------------------------------
    def push_one(self, number: int) -> None:
        kind = random.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
        label = f"{kind[0]}{number}"
        try:
            if kind == "sync":
                SoakSync.perform_async(label)
                labels = {label: "sync"}
            elif kind == "async":
                SoakAsync.perform_async(label)
                labels = {label: "async"}
            elif kind == "walk":
                SoakWalk.perform_async(label, WALK_ITEMS)
                labels = {label: "walk"} | {f"{label}:{i}": "item" for i in range(WALK_ITEMS)}
            else:
                steps = [f"{label}.{part}" for part in ("a", "b", "c", "d")]
                canvas = chain(SoakStep.si(steps[0]), group(SoakStep.si(steps[1]), SoakStep.si(steps[2])))
                (canvas | SoakStep.si(steps[3])).perform_async()
                labels = dict.fromkeys(steps, "step")
        except Exception as exc:  # an outage the push could not hold (OOM, a workflow's start): counted, not retried
            with self.ledger.lock:
                self.ledger.uncertain.append(label)
                name = type(exc).__name__
                self.ledger.push_errors[name] = self.ledger.push_errors.get(name, 0) + 1
            time.sleep(0.2)
            return
        now = time.time()
        with self.ledger.lock:
            for each, each_kind in labels.items():
                self.ledger.pushed[each] = (each_kind, now)

    def pusher(self) -> None:
        number, interval = 0, 1 / self.rate
        next_at = time.monotonic()
        while not self.stop_pushing.is_set():
            self.push_one(number)
            number += 1
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))

    def faults(self) -> None:
        plan = self.plan
        events = [(at, self.restart_redis) for at in _every(plan.restart_every, plan.seconds)]
        events += [(at, self.kill_worker_child) for at in _every(plan.kill_every, plan.seconds, plan.kill_every / 2)]
        events.append((plan.maxmemory_at, self.maxmemory_episode))
        for at, action in sorted(events, key=lambda event: event[0]):
            if self.finished.wait(max(0.0, self.started + at - time.monotonic())):
                return
            try:
                action()
            except Exception as exc:
                self.note(f"fault {action.__name__} failed: {exc!r}")

    def sampler(self) -> None:
        while not self.finished.wait(self.plan.sample_every):
            self.sample()

    def sample(self) -> None:
        assert self.worker is not None
        pids = procs.tree(self.worker.pid)
        row: dict[str, float] = {"minute": (time.monotonic() - self.started) / 60}
        row["rss_mb"] = sum(procs.status_value(pid, "VmRSS") for pid in pids) / 1024
        row["threads"] = sum(procs.status_value(pid, "Threads") for pid in pids)
        row["fds"] = sum(_open_fds(pid) for pid in pids)
        row["processes"] = len(pids)
        row["load1"] = os.getloadavg()[0]  # the machine's: the soak shares it with whatever else runs
        try:
            client = self.redis.client()
            row["redis_mb"] = int(client.info("memory")["used_memory"]) / 2**20
            row["queued"] = sum(int(client.llen(f"queue:{q}")) for q in ("default", "async", "walks"))
        except redis.RedisError:
            pass
        row["done_lines"] = sum(1 for _ in soak_report.done_lines(self.workdir))
        with self.ledger.lock:
            row["pushed"] = len(self.ledger.pushed)
            self.ledger.samples.append(row)

    # -- the run -------------------------------------------------------------------------------------------------
    def run(self, drain_seconds: float) -> dict[str, Any]:
        self.redis.start()
        # the pusher's config: the default one, from the environment (the worker's comes from its kiq.toml)
        os.environ.update(KIQ_REDIS_URL=self.redis.url, KIQ_PLUGINS="workflow", KIQ_RELIABLE_PUSH="true")
        kiq.default_config()
        self.start_worker()
        self.started = time.monotonic()
        threads = [threading.Thread(target=t, daemon=True) for t in (self.pusher, self.faults, self.sampler)]
        for thread in threads:
            thread.start()
        time.sleep(self.plan.seconds)
        self.stop_pushing.set()
        threads[0].join()
        self.note("pushing stopped; draining")
        drained = self.wait_drained(drain_seconds)
        self.note(f"drained: {drained}")
        self.sample()
        self.finished.set()
        assert self.worker is not None
        self.worker.send_signal(signal.SIGTERM)
        self.worker.wait(60)
        counts = self.dead_and_retries()
        self.redis.stop()
        return soak_report.analyse(self, counts)

    def wait_drained(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            done = soak_report.done_labels(self.workdir)
            with self.ledger.lock:
                missing = [label for label in self.ledger.pushed if label not in done]
            if not missing:
                return True
            time.sleep(5)
        return False

    def dead_and_retries(self) -> dict[str, int]:
        client = self.redis.client()
        return {name: int(client.zcard(name)) for name in ("dead", "retry", "schedule")}


def _every(interval: float, length: float, offset: float = 0.0) -> list[float]:
    count = int((length - offset) // interval)
    return [offset + interval * (i + 1) for i in range(count) if offset + interval * (i + 1) < length - 1]


def _open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", 60)))
    parser.add_argument("--rate", type=float, default=20.0, help="pushes a second (a workflow is one, of 4 jobs)")
    parser.add_argument("--drain-seconds", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kiq-soak-"))
    print(f"soak: {args.minutes} min at {args.rate}/s, work dir {workdir}", flush=True)
    soak = Soak(args.minutes, args.rate, workdir)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped early: still stop the worker and the server
    try:
        result = soak.run(args.drain_seconds)
    finally:
        if soak.worker is not None and soak.worker.poll() is None:
            soak.worker.kill()
        soak.redis.stop()
    paths = soak_report.write(result, args.out)
    print(soak_report.summary(result))
    print("written: " + ", ".join(str(path) for path in paths))
    sys.exit(0 if result["lost"]["total"] == 0 else 1)


if __name__ == "__main__":
    main()
