"""Held job outcomes (kiq.server.outcomes) on real workers (run in this process, but a swarm's) and a real
redis-server of the test's own (AOF, ``appendfsync always``), stopped and restarted on the same port and directory, or
filled to maxmemory.

Jobs whose code touches Redis fail while it is down or refuses writes, and so does recording their failure: the
worker must hold those outcomes and write them once Redis is back, with basic and reliable fetch alike, and log the
outage once. The accounting of each test: every pushed job ends done, in ``retry`` or in ``dead`` (0 lost), and
nothing stays in a queue or a working list (0 stuck).
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import kiq
from tests.jobs.outcomes import DEATHS, DONE
from tests.outage_support import AofRedis, aof_redis
from tests.support import FAST, InProcessWorker, WorkerProcess, make_retries_due, wait_until
from tests.swarm_support import forked

# an exception no thread of the worker caught fails the test (a worker process wrote its "Traceback" to its output)
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")]
CONCURRENCY = 5
BACK_WITHIN = 10.0  # seconds after Redis returns by which every job must be done, in retry or in dead
ENV = {**FAST, "KIQ_PLUGINS": "limiter", "KIQ_POLL_INTERVAL": "0.5"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AofRedis]:
    with aof_redis(tmp_path / "redis") as aof:
        yield aof


@pytest.fixture
def client(server: AofRedis) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(server.url, decode_responses=True)
    yield connection
    connection.close()


def push(url: str, count: int, ms: int) -> set[str]:
    """``count`` jobs of ``ms`` milliseconds that touch Redis, every fourth one inside a limiter."""
    config = kiq.Config(redis_url=url)
    try:
        pusher = kiq.Client(config)
        plain = pusher.push_bulk({"class": "OutcomesTouchesRedis", "args": [[ms]] * (count - count // 4)})
        limited = pusher.push_bulk({"class": "OutcomesLimited", "args": [[ms]] * (count // 4)})
    finally:
        config.redis.close()
    return {jid for jid in [*plain, *limited] if jid is not None}


def working_lists(client: redis.Redis) -> list[str]:
    return list(client.scan_iter("kiq:working:*"))


def unaccounted(client: redis.Redis, jids: set[str]) -> set[str]:
    """The jobs neither done nor in ``retry``/``dead``, while something sits in a queue or a working list (a job
    done, in retry or dead but also still listed would be stuck, and is counted as such)."""
    ended = client.smembers(DONE)
    ended |= {json.loads(member)["jid"] for name in ("retry", "dead") for member in client.zrange(name, 0, -1)}
    listed = client.llen("queue:default") + sum(client.llen(key) for key in working_lists(client))
    missing = jids - ended
    return missing if missing or not listed else {f"{listed} still listed"}


def worker_args(fetch: str, *extra: str) -> list[str]:
    return ["-r", "tests.jobs.outcomes", "-c", str(CONCURRENCY), "--fetch", fetch, *extra]


def start_worker(server: AofRedis, fetch: str, *extra: str) -> InProcessWorker:
    """The worker ``kiq worker`` would run, in this process (closed at the end of the ``with`` block)."""
    return InProcessWorker(worker_args(fetch, *extra), server.url, ENV)


def outcome_writers() -> int:
    """The threads writing held job outcomes alive in this process."""
    return sum(thread.name == "kiq-outcomes" for thread in threading.enumerate())


def run_through_outage(server: AofRedis, client: redis.Redis, fetch: str, stop: str, outage: float) -> None:
    jids = push(server.url, 300, 20)
    writers = outcome_writers()
    with start_worker(server, fetch) as worker:
        wait_until(lambda: client.scard(DONE) >= 50, 30, message="50 jobs before the outage")
        server.stop(stop)
        wait_until(lambda: "unreachable" in worker.output(), 30, message="the outage in the log")
        time.sleep(outage)  # the outage's length, not a wait for a condition
        server.start()
        try:
            wait_until(lambda: not unaccounted(client, jids), BACK_WITHIN, message="every job done, in retry or dead")
        except AssertionError:
            raise AssertionError(f"not done, in retry or dead: {unaccounted(client, jids)}") from None
        wait_until(lambda: "Redis works again" in worker.output(), 10, message="the end of the outage in the log")
        assert worker.stop() == 0
        output = worker.output()
    # the thread that wrote the held outcomes ended with the worker (none left in this process)
    wait_until(lambda: outcome_writers() <= writers, 5, message="the worker's outcome writer to end")
    assert output.count("is unreachable") == 1 and output.count("Redis works again") == 1, output
    # the jobs running when Redis went away failed, and their failures were held, then written (to retry: after a
    # long outage they are due at once, and the poller has already run them again)
    held = re.search(r"; (\d+) job outcomes held meanwhile are written", output)
    assert held is not None and int(held.group(1)) >= 1, output
    assert "Internal exception" not in output and "Traceback" not in output, output
    assert not working_lists(client)


# How Redis goes away with each fetcher. Reliable fetch: killed or stopped mid-traffic (a fetch whose reply dies with
# Redis is reconciled when it is back). Basic fetch: between two commands, since a pop whose reply is lost loses its
# jobs, the at-most-once window basic fetch has by design (docs/guide/guarantees.md), not what these tests are about.
STOPS = [pytest.param("basic", "pause", id="basic"), pytest.param("reliable", "kill", id="reliable-kill")]


@pytest.mark.parametrize(("fetch", "stop"), [*STOPS, pytest.param("reliable", "term", id="reliable-term")])
def test_jobs_failing_during_a_3s_outage_are_held_and_handed_on(
    server: AofRedis, client: redis.Redis, fetch: str, stop: str
) -> None:
    run_through_outage(server, client, fetch, stop, 3.0)


@pytest.mark.soak  # make soak; the same with a 3 s outage: the test above
@pytest.mark.parametrize(("fetch", "stop"), STOPS)
def test_jobs_failing_during_a_60s_outage_are_held_and_handed_on(
    server: AofRedis, client: redis.Redis, fetch: str, stop: str
) -> None:
    run_through_outage(server, client, fetch, stop, 60.0)


class LengthWatch:
    """Samples the total length of the worker's working lists (every few ms, in a thread) and keeps the largest."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.largest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LengthWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            total = sum(self.client.llen(key) for key in working_lists(self.client))
            self.largest = max(self.largest, total)


@pytest.mark.parametrize("fetch", ["basic", "reliable"])
def test_at_maxmemory_a_worker_takes_no_more_jobs_than_its_threads_and_drains_once_memory_is_freed(
    server: AofRedis, client: redis.Redis, fetch: str
) -> None:
    jids = push(server.url, 200, 10)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)  # always over the limit: every write that needs memory is refused
    with LengthWatch(client) as watch, start_worker(server, fetch) as worker:
        wait_until(
            lambda: "failed: OutOfMemoryError: command not allowed when used memory" in worker.output(),
            30,
            message="a job failing at maxmemory",
        )
        time.sleep(2.0)  # the worker has had time to take more jobs, if it would
        assert client.llen("queue:default") >= 200 - CONCURRENCY
        assert client.scard(DONE) == 0
        client.config_set("maxmemory", 0)
        wait_until(lambda: not unaccounted(client, jids), 30, message="every job done, in retry or dead")
        make_retries_due(client)  # the held failures, due now: everything runs to its end
        wait_until(lambda: client.scard(DONE) == len(jids), 30, message="every job done")
        wait_until(lambda: not working_lists(client), 10, message="the working lists acknowledged")
        assert worker.stop() == 0
        output = worker.output()
    assert watch.largest <= CONCURRENCY, watch.largest
    assert client.smembers(DONE) == jids
    assert output.count("is out of memory (maxmemory reached") == 1 and output.count("Redis works again") == 1, output
    assert "Internal exception" not in output


def test_a_stop_with_redis_still_down_logs_each_held_job_replayably_and_exits_non_zero(
    server: AofRedis, client: redis.Redis
) -> None:
    jids = push(server.url, 30, 300)
    with start_worker(server, "basic", "-t", "2") as worker:
        wait_until(lambda: client.scard(DONE) >= CONCURRENCY, 30, message="the first jobs done")
        server.stop()
        wait_until(lambda: "failed: ConnectionError" in worker.output(), 30, message="a job failing in the outage")
        assert worker.stop() == 3
        output = worker.output()
    lines = [line for line in output.splitlines() if "ERROR: unwritten job outcome:" in line]
    assert lines, output
    server.start()
    done = client.smembers(DONE)
    replayed = set()
    for line in lines:  # the replay of docs/guide/guarantees.md
        entry = json.loads(line.split("; replay: ", 1)[1])
        assert entry["queue"] == "default" and json.loads(entry["payload"])["jid"] in jids
        client.execute_command(*entry["command"])
        replayed.add(json.loads(entry["command"][3])["jid"])
    assert replayed == {json.loads(member)["jid"] for member in client.zrange("retry", 0, -1)}
    assert not replayed & done


def test_a_death_hook_whose_redis_write_is_refused_is_called_again_once_redis_is_back(
    server: AofRedis, client: redis.Redis
) -> None:
    config = kiq.Config(redis_url=server.url)
    try:
        jids = set(kiq.Client(config).push_bulk({"class": "OutcomesUnretried", "retry": False, "args": [[20]] * 200}))
    finally:
        config.redis.close()
    env = {**ENV, "KIQ_PLUGINS": "tests.jobs.outcomes:DeathRecorder"}
    with InProcessWorker(worker_args("basic"), server.url, env) as worker:
        wait_until(lambda: client.scard(DONE) >= 20, 30, message="20 jobs before the outage")
        server.stop()
        wait_until(lambda: "failed: ConnectionError" in worker.output(), 30, message="a job failing in the outage")
        server.start()
        # every job failed in the outage died (retry: false), and its death hook's write is held, then made
        wait_until(lambda: client.scard(DONE) + client.scard(DEATHS) == len(jids), BACK_WITHIN, message="all ended")
        assert worker.stop() == 0
        output = worker.output()
    assert client.smembers(DONE) | client.smembers(DEATHS) == jids
    assert client.scard(DEATHS) >= 1
    assert "failed in kiq_death" not in output and "unwritten job outcome" not in output, output
    assert output.count("is unreachable") == 1 and output.count("Redis works again") == 1, output


def test_a_swarm_stopped_with_redis_still_down_restarts_no_child_and_exits_non_zero(
    server: AofRedis, client: redis.Redis, tmp_path: Path
) -> None:
    push(server.url, 60, 300)
    # a worker process: a swarm's, whose child is stopped by a signal of its own
    args = worker_args("reliable", "-t", "2", "-p", "2")
    with WorkerProcess(args, server.url, tmp_path / "swarm.log", ENV) as swarm:
        wait_until(lambda: client.scard(DONE) >= CONCURRENCY, 30, message="the first jobs done")
        server.stop()
        first = forked(swarm.pid)[0]
        wait_until(lambda: failed_in(swarm.output(), first), 30, message="a job of the first child failing")
        os.kill(first, signal.SIGTERM)  # stopped on its own (as from the API): it exits with 3 and stays stopped
        try:
            wait_until(lambda: f"(pid {first}) exited with 3" in swarm.output(), 30, message="the first child's exit")
        except AssertionError as timeout:
            raise AssertionError(f"{timeout}; the swarm's log:\n{swarm.output()}") from None
        assert swarm.stop() == 3  # the other child gives up its held outcomes too; the parent says so
        output = swarm.output()
    assert "ERROR: unwritten job outcome:" in output, output
    assert "restarting" not in output, output


def failed_in(output: str, pid: int) -> bool:
    return any(f"pid={pid} " in line and "failed: ConnectionError" in line for line in output.splitlines())
