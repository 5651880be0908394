"""What the adversarial iteration tests share: a redis-server of the test's own (stopped, restarted, filled up) with
a default config on it, and workers running ``tests.jobs.iteration_adversarial`` against it: in this process
(``run_worker``), or ``kiq worker`` processes (``start_worker``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

import kiq
import kiq.ext
from tests.jobs.iteration_adversarial import QUEUE
from tests.outage_support import AofRedis, aof_redis
from tests.support import FAST, InProcessWorker, WorkerProcess, fresh_config

FLUSH = "0.1"  # seconds between cursor saves in these tests' workers


@contextmanager
def own_redis(tmp_path: Path) -> Iterator[tuple[AofRedis, kiq.Config]]:
    """A redis-server of this test's own, and a default config on it."""
    with aof_redis(tmp_path / "redis") as server:
        configs = fresh_config(server.url)
        config = next(configs)
        try:
            yield server, config
        finally:
            configs.close()


ARGS = ("-r", "tests.jobs.iteration_adversarial", "-q", QUEUE, "-c", "2")
ENV = {**FAST, "KIQ_ITERATION_FLUSH_INTERVAL": FLUSH}


def run_worker(server: AofRedis, *args: str, env: dict[str, str] | None = None) -> InProcessWorker:
    """The worker ``kiq worker`` would run on ``server`` for the adversarial jobs' queue, in this process; stopped
    at the end of a ``with`` block (its running jobs requeued). ``env``: ``KIQ_*`` settings only."""
    return InProcessWorker([*ARGS, *args], server.url, {**ENV, **(env or {})})


def start_worker(server: AofRedis, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> WorkerProcess:
    """A ``kiq worker`` on ``server`` for the adversarial jobs' queue; the caller kills it (``with``)."""
    log = tmp_path / f"worker-{len(list(tmp_path.glob('worker-*.log')))}.log"
    return WorkerProcess([*ARGS, *args], server.url, log, {**ENV, **(env or {})})


def queued(r: redis.Redis) -> list[dict[str, object]]:
    return [kiq.ext.loads(raw) for raw in r.lrange(f"queue:{QUEUE}", 0, -1)]


def nothing_failed(r: redis.Redis) -> None:
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
