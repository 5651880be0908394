"""The systems the benchmark measures: how to start each one's worker and pusher, and where its queue is.

Every worker runs one process with 10 concurrent jobs where the system has that (RQ has no thread pool),
logs at WARNING, and is timed by the harness from outside (bench/runner.py), never by its own counters.
``IO_SYSTEMS`` are the I/O-bound drain's (``--io``): async jobs that each await 50 ms, one worker process per
system, every one allowed the same number of jobs in flight (``--io-concurrency``, 1,000 by default).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CONCURRENCY = 10
SIDEKIQ_JOBS = "bench/systems/sidekiq_jobs.rb"


@dataclass(frozen=True)
class Toolchain:
    """What the run uses to start things: interpreters, Redis, the tracking database."""

    root: Path
    redis_url: str
    kiq_python: str
    peer_python: str
    tracking_url: str  # the database; the run uses its own schema in it, reset before the tracking system runs
    tracking_schema: str
    yjit: bool
    io_concurrency: int = 1000  # the I/O drain: jobs every system awaits at once
    pusher_cpus: frozenset[int] | None = None  # the CPUs the pushers run on (Linux), None: any

    @property
    def tracking_url_in_schema(self) -> str:
        separator = "&" if "?" in self.tracking_url else "?"
        return f"{self.tracking_url}{separator}options=-csearch_path%3D{self.tracking_schema}"

    def peer_script(self, name: str) -> str:
        return str(Path(self.peer_python).parent / name)


Command = Callable[[Toolchain], list[str]]
EnvFor = Callable[[Toolchain], dict[str, str]]


@dataclass(frozen=True)
class System:
    name: str
    label: str
    worker: Command
    pusher: Command  # + MODE COUNT --rate R (common.py's protocol; the Ruby pusher speaks it too)
    queue_key: str  # what the harness polls (LLEN, or ZCARD when queue_is_zset)
    env: EnvFor = field(default=lambda tools: {})
    failure_keys: tuple[str, ...] = ()  # where failed jobs would land; checked empty after the run
    concurrency: str = f"{CONCURRENCY} threads"  # "{n}": the I/O drain's concurrency (Toolchain.io_concurrency)
    setup: Command | None = None  # run before the system's first push
    # + COUNT TIMEOUT: started with the worker; after a line on stdin, waits until COUNT jobs' side effects are
    # stored elsewhere (the tracking database) and prints {"at": epoch seconds, "finished": n}; the drain is then
    # also timed to that point ("settled")
    settle: Command | None = None
    settled: str = "recorded finished in the database"  # what settle waits for, as the run's note says it
    queue_is_zset: bool = False
    in_flight: int | None = None  # the I/O drain: jobs the worker awaits at once, when not Toolchain.io_concurrency


def _kiq(name: str, label: str, *worker_args: str, env: EnvFor = lambda tools: {}, **kwargs: Command | str) -> System:
    def worker(t: Toolchain) -> list[str]:
        command = [t.kiq_python, "-m", "kiq.cli", "worker", "-r", "bench.systems.kiq_jobs", "-c", str(CONCURRENCY)]
        return [*command, "--redis-url", t.redis_url, *worker_args]

    return System(
        name=name,
        label=label,
        worker=worker,
        pusher=lambda t: [t.kiq_python, "-m", "bench.systems.common", "bench.systems.kiq_jobs"],
        queue_key="queue:default",
        env=lambda t: {"KIQ_REDIS_URL": t.redis_url, "KIQ_LOG_LEVEL": "WARNING", **env(t)},
        failure_keys=("retry", "dead"),
        **kwargs,  # type: ignore[arg-type]
    )


def _peer(name: str, label: str, module: str, worker: list[str], queue_key: str, **kwargs: object) -> System:
    """``worker``: the command after the peer venv's script or ``python`` (the first word), with
    ``{url}`` for the Redis URL and ``{n}`` for the I/O drain's concurrency."""

    def command(t: Toolchain) -> list[str]:
        program = t.peer_python if worker[0] == "python" else t.peer_script(worker[0])
        words = (word.replace("{url}", t.redis_url).replace("{n}", str(t.io_concurrency)) for word in worker[1:])
        return [program, *words]

    return System(
        name=name,
        label=label,
        worker=command,
        pusher=lambda t: [t.peer_python, "-m", "bench.systems.common", f"bench.systems.{module}"],
        queue_key=queue_key,
        **kwargs,  # type: ignore[arg-type]
    )


def _sidekiq_worker(t: Toolchain) -> list[str]:
    return ["sidekiq", "-r", str(t.root / SIDEKIQ_JOBS), "-c", str(CONCURRENCY), "-q", "default"]


C = str(CONCURRENCY)
SYSTEMS: list[System] = [
    _kiq("kiq_basic", "kiq basic"),
    # what the dashboard's per-class metrics cost the drain: the same worker without them
    _kiq("kiq_no_metrics", "kiq basic, metrics off", env=lambda t: {"KIQ_METRICS": "false"}),
    _kiq("kiq_reliable", "kiq reliable", "--fetch", "reliable"),
    _kiq("kiq_otel", "kiq reliable+otel", "--fetch", "reliable", env=lambda t: {"KIQ_PLUGINS": "otel"}),
    _kiq(
        "kiq_tracking",
        "kiq tracking (PG)",
        env=lambda t: {
            "KIQ_PLUGINS": "tracking",
            "KIQ_TRACKING_DATABASE_URL": t.tracking_url_in_schema,
            "BENCH_TRACK": "1",
        },
        setup=lambda t: [t.kiq_python, "-m", "bench.systems.tracking_db", "reset", t.tracking_url, t.tracking_schema],
        settle=lambda t: [t.kiq_python, "-m", "bench.systems.tracking_db", "wait", t.tracking_url, t.tracking_schema],
    ),
    # what a batch costs its jobs: every push inside one `with Batch(...)` block, each outcome counted in the batch
    _kiq(
        "kiq_batch",
        "kiq batch",
        env=lambda t: {"KIQ_PLUGINS": "batch", "BENCH_BATCH": "1"},
        settle=lambda t: [t.kiq_python, "-m", "bench.systems.batch_settle"],
        settled="counted succeeded in their batch",
    ),
    System(
        name="sidekiq",
        label="Sidekiq (Ruby)",
        worker=_sidekiq_worker,
        pusher=lambda t: ["ruby", str(t.root / SIDEKIQ_JOBS)],
        queue_key="queue:default",
        env=lambda t: {"REDIS_URL": t.redis_url, **({"RUBYOPT": "--yjit"} if t.yjit else {})},
        failure_keys=("retry", "dead"),
    ),
    _peer(
        "dramatiq",
        "Dramatiq",
        "dramatiq_jobs",
        ["dramatiq", "bench.systems.dramatiq_jobs", "--processes", "1", "--threads", C],
        "dramatiq:default",
        failure_keys=("dramatiq:default.DQ", "dramatiq:default.XQ"),
    ),
    _peer(
        "huey",
        "huey",
        "huey_jobs",
        ["huey_consumer", "bench.systems.huey_jobs.huey", "-w", C, "-k", "thread", "-q"],
        "huey.redis.bench",
    ),
    _peer(
        "arq",
        "arq",
        "arq_jobs",
        ["python", "-m", "bench.systems.arq_jobs"],
        "arq:queue",
        concurrency=f"{CONCURRENCY} coroutines",
        queue_is_zset=True,
    ),
    _peer(
        "rq",
        "RQ",
        "rq_jobs",
        ["rq", "worker", "-w", "rq.worker.SimpleWorker", "--url", "{url}", "--logging_level", "WARNING", "default"],
        "rq:queue:default",
        failure_keys=("rq:failed:default",),
        concurrency="1 (no thread pool)",
    ),
    _peer(
        "celery",
        "Celery",
        "celery_jobs",
        ["celery", "-A", "bench.systems.celery_jobs", "worker", "-P", "threads", "-c", C, "-l", "WARNING"],
        "celery",
    ),
]

BY_NAME = {system.name: system for system in SYSTEMS}
BASELINE = "sidekiq"


# -- the I/O-bound drain (``--io``): async jobs that each await 50 ms, every system at the same concurrency -------
def _kiq_io(name: str, label: str, concurrency: str, *async_args: str, in_flight: int | None = None) -> System:
    def worker(t: Toolchain) -> list[str]:
        command = [t.kiq_python, "-m", "kiq.cli", "worker", "-r", "bench.systems.kiq_io", "-c", str(CONCURRENCY)]
        return [*command, "--redis-url", t.redis_url, *(a.replace("{n}", str(t.io_concurrency)) for a in async_args)]

    return System(
        name=name,
        label=label,
        worker=worker,
        pusher=lambda t: [t.kiq_python, "-m", "bench.systems.common", "bench.systems.kiq_io"],
        queue_key="queue:default",
        env=lambda t: {"KIQ_REDIS_URL": t.redis_url, "KIQ_LOG_LEVEL": "WARNING"},
        failure_keys=("retry", "dead"),
        concurrency=concurrency,
        in_flight=in_flight,
    )


N = "{n}"  # replaced by the run's --io-concurrency
IO_SYSTEMS: list[System] = [
    _kiq_io("kiq_io", "kiq async", f"{N} coroutines (-a {N})", "-a", N),
    _kiq_io("kiq_io_default", "kiq async, default -a", "200 coroutines (default -a)", in_flight=200),
    _peer(
        "arq_io",
        "arq",
        "arq_io",
        ["python", "-m", "bench.systems.arq_io"],
        "arq:queue",
        env=lambda t: {"BENCH_IO_CONCURRENCY": str(t.io_concurrency)},
        concurrency=f"{N} coroutines (max_jobs)",
        queue_is_zset=True,
    ),
    _peer(
        "taskiq_io",
        "taskiq",
        "taskiq_io",
        f"taskiq worker bench.systems.taskiq_io:broker --workers 1 --max-async-tasks {N} --max-prefetch 0 "
        "--log-level WARNING".split(),
        "taskiq",
        concurrency=f"{N} coroutines (--max-async-tasks)",
    ),
    _peer(
        "dramatiq_io",
        "Dramatiq (AsyncIO)",
        "dramatiq_io",
        ["dramatiq", "bench.systems.dramatiq_io", "--processes", "1", "--threads", N],
        "dramatiq:default",
        env=lambda t: {"BENCH_IO_CONCURRENCY": str(t.io_concurrency)},  # its connection pool's size
        failure_keys=("dramatiq:default.DQ", "dramatiq:default.XQ"),
        concurrency=f"{N} threads, 1 event loop",
    ),
]
IO_BY_NAME = {system.name: system for system in IO_SYSTEMS}
