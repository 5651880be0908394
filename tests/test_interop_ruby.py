"""kiq and a real Ruby Sidekiq (Debian's ruby-sidekiq, 6.4.1 in CI) sharing one Redis.

One Ruby Sidekiq process per module runs tests/ruby/jobs.rb on the ``ruby`` queue; kiq workers run
tests/jobs/interop.py on the ``kiq`` queue; tests/ruby/client.rb drives Ruby's client and ``sidekiq/api``.
Without Ruby and its sidekiq gem these tests skip, unless KIQ_REQUIRE_SERVICES=1 (CI), where they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
import redis

import kiq
from kiq.api import DeadSet, ProcessSet, RetrySet, ScheduledSet, SortedEntry, Workers
from kiq.payload import loads, new_jid
from kiq.redis import connect
from kiq.server.scheduled import Poller

from .jobs.interop import (
    KIQ_QUEUE,
    KIQ_RUNS,
    RELEASE,
    RUBY_QUEUE,
    RUBY_RUNS,
    InteropBlockJob,
    InteropFlakyJob,
    InteropJob,
    RubyEcho,
)
from .support import ROOT, InProcessWorker, missing_service, wait_until

pytestmark = pytest.mark.slow

RUBY_DIR = ROOT / "tests" / "ruby"
RUBY_RELEASE = "interop:ruby:release:"  # + token: what the Ruby job RubyBlock waits on (tests/ruby/jobs.rb)
JID = re.compile(r"\A[0-9a-f]{24}\Z")
T = TypeVar("T")

KIQ_WORKER_ARGS = ("-r", "tests.jobs.interop", "-q", KIQ_QUEUE)
FAST_POLLS = {"KIQ_POLL_INTERVAL": "0.2", "KIQ_HEARTBEAT_INTERVAL": "0.2"}  # kiq's side: no assertion times them


# -- Ruby, its sidekiq gem, and the processes --------------------------------------------------------------
@dataclass(frozen=True)
class SidekiqInstall:
    ruby: str
    version: str
    executable: str  # the gem's ``sidekiq`` script, run with ``ruby``


def find_sidekiq() -> SidekiqInstall | str:
    """Ruby (KIQ_TEST_RUBY, else on PATH) with the sidekiq gem, or why there is none."""
    ruby = os.environ.get("KIQ_TEST_RUBY") or shutil.which("ruby")
    if not ruby:
        return "no ruby (set KIQ_TEST_RUBY or put ruby on PATH)"
    probe = 'require "sidekiq"; print Sidekiq::VERSION, "\\n", Gem.bin_path("sidekiq", "sidekiq")'
    try:
        done = subprocess.run([ruby, "-e", probe], capture_output=True, text=True, timeout=30)
    except OSError as exc:
        return f"cannot run {ruby}: {exc}"
    if done.returncode != 0:
        return f"{ruby} has no usable sidekiq gem (Debian: apt-get install ruby-sidekiq): {done.stderr.strip()}"
    version, executable = done.stdout.split("\n")
    return SidekiqInstall(ruby, version, executable)


class HasOutput(Protocol):
    def output(self) -> str: ...


def wait_for(predicate: Callable[[], T | None], message: str, *logs: HasOutput, timeout: float = 30.0) -> T:
    """``wait_until`` a value that is not None (or False), with the tail of the processes' logs on failure."""
    try:
        value = wait_until(predicate, timeout, interval=0.1, message=message)
    except AssertionError as exc:
        tails = "".join(f"\n--- {type(log).__name__} log (tail):\n{log.output()[-4000:]}" for log in logs)
        raise AssertionError(f"{exc}{tails}") from None
    assert value is not None
    return value


class RubySidekiq:
    """A real ``sidekiq`` process running tests/ruby/jobs.rb on the ``ruby`` queue (or another script of
    tests/ruby/ on another queue); output in a log file."""

    def __init__(self, install: SidekiqInstall, redis_url: str, log_path: Path, script: str = "jobs.rb",
                 queue: str = RUBY_QUEUE) -> None:  # fmt: skip
        self.redis_url = redis_url
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        command = [install.ruby, install.executable, "-r", str(RUBY_DIR / script), "-q", queue]
        self.proc = subprocess.Popen(
            [*command, "-c", "3", "-t", "2"],  # -t: Sidekiq's shutdown timeout, short for the teardown
            cwd=ROOT,
            env={**os.environ, "REDIS_URL": redis_url},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def identity(self, connection: redis.Redis) -> str | None:
        """Its identity, once its heartbeat (every 5 s in Sidekiq 6, 10 s in 7) has registered it."""
        if self.proc.poll() is not None:
            raise AssertionError(f"Ruby Sidekiq exited with {self.proc.returncode}:\n{self.output()[-4000:]}")
        for identity in connection.smembers("processes"):
            info = connection.hget(identity, "info")
            if info is not None and loads(info).get("pid") == self.proc.pid:
                return str(identity)
        return None

    def stop(self) -> None:
        """TERM (Sidekiq's shutdown signal), then KILL if it is still there after 15 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


class RubyClient:
    """Runs tests/ruby/client.rb: Ruby Sidekiq's client and API on the test Redis; returns its JSON answer."""

    def __init__(self, install: SidekiqInstall, redis_url: str) -> None:
        self.install = install
        self.env = {**os.environ, "REDIS_URL": redis_url}

    def __call__(self, command: str, *params: Any) -> Any:
        done = subprocess.run(
            [self.install.ruby, str(RUBY_DIR / "client.rb"), command, json.dumps(params)],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise AssertionError(f"ruby client.rb {command} {params!r} failed:\n{done.stderr}")
        return json.loads(done.stdout)


@pytest.fixture(scope="module")
def sidekiq_install() -> SidekiqInstall:
    found = find_sidekiq()
    if isinstance(found, str):
        missing_service(found)
    return found


@pytest.fixture(scope="module")
def ruby_sidekiq_process(
    request: pytest.FixtureRequest, sidekiq_install: SidekiqInstall, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RubySidekiq]:
    """One Ruby Sidekiq for the module, on the Redis that ``e2e_config`` uses (booting it per test costs ~1 s)."""
    url = os.environ.get("KIQ_TEST_REDIS_URL") or request.getfixturevalue("embedded_redis_url")
    with heartbeating(
        RubySidekiq(sidekiq_install, url, tmp_path_factory.mktemp("ruby-sidekiq") / "sidekiq.log")
    ) as ruby:
        yield ruby


@contextmanager
def heartbeating(process: RubySidekiq) -> Iterator[RubySidekiq]:
    """A started Ruby Sidekiq once its first heartbeat registered it; stopped at the end."""
    connection = connect(process.redis_url)
    try:
        wait_for(lambda: process.identity(connection), "Ruby Sidekiq's first heartbeat", process)
        yield process
    finally:
        connection.close()
        process.stop()


@pytest.fixture
def ruby_sidekiq(e2e_config: kiq.Config, ruby_sidekiq_process: RubySidekiq) -> RubySidekiq:
    assert e2e_config.redis_url == ruby_sidekiq_process.redis_url
    return ruby_sidekiq_process


@pytest.fixture
def ruby_client(e2e_config: kiq.Config, sidekiq_install: SidekiqInstall) -> RubyClient:
    assert e2e_config.redis_url is not None
    return RubyClient(sidekiq_install, e2e_config.redis_url)


def runs(connection: redis.Redis, key: str) -> dict[str, dict[str, Any]]:
    """The finished runs the jobs of either side recorded, by jid."""
    recorded = (loads(raw) for raw in connection.lrange(key, 0, -1))
    return {run["jid"]: run for run in recorded}


def runs_of(connection: redis.Redis, key: str, jids: list[str]) -> dict[str, dict[str, Any]] | None:
    """The runs of all these jobs, or None while one is missing."""
    found = runs(connection, key)
    return found if all(jid in found for jid in jids) else None


ARGS = [1, "two", {"three": [3.5, None, True], "vier": "grüße"}, []]


# -- 1. Ruby pushes, kiq runs ------------------------------------------------------------------------------
def test_ruby_pushed_jobs_run_in_kiq_with_the_same_payload(
    e2e_config: kiq.Config, ruby_client: RubyClient, start_worker: Callable[..., InProcessWorker]
) -> None:
    r = e2e_config.redis
    by_class = ruby_client("perform_async", *ARGS)["jid"]  # InteropJob.perform_async, a Ruby stand-in class
    by_name = ruby_client("push", {"class": "InteropJob", "args": ARGS, "queue": KIQ_QUEUE})["jid"]
    by_kiq = InteropJob.perform_async(*ARGS)
    assert by_kiq is not None

    # Both sides write the same payload: same keys and types (only jid and times differ).
    payloads = {job["jid"]: job for job in map(loads, r.lrange(f"queue:{KIQ_QUEUE}", 0, -1))}
    assert set(payloads) == {by_class, by_name, by_kiq}
    assert r.smembers("queues") == {KIQ_QUEUE}
    for job in payloads.values():
        assert set(job) == {"class", "args", "queue", "retry", "jid", "created_at", "enqueued_at"}
        assert (job["class"], job["args"], job["queue"], job["retry"]) == ("InteropJob", ARGS, KIQ_QUEUE, True)
        assert JID.match(job["jid"])
        assert type(job["created_at"]) is float and type(job["enqueued_at"]) is float
        assert job["created_at"] <= job["enqueued_at"] == pytest.approx(time.time(), abs=60)

    # Ruby's API reads kiq's payload as it reads its own.
    seen = {job["jid"]: job for job in ruby_client("queue", KIQ_QUEUE)}
    assert set(seen) == set(payloads)
    assert seen[by_kiq]["args"] == ARGS
    assert seen[by_kiq]["ruby_enqueued_at"] == pytest.approx(payloads[by_kiq]["enqueued_at"])
    assert seen[by_kiq]["ruby_created_at"] == pytest.approx(payloads[by_kiq]["created_at"])
    assert seen[by_kiq]["ruby_latency"] >= 0

    worker = start_worker(*KIQ_WORKER_ARGS)
    done = wait_for(lambda: runs_of(r, KIQ_RUNS, [by_class, by_name, by_kiq]), "kiq to run the jobs", worker)
    for jid in (by_class, by_name, by_kiq):
        assert done[jid] == {"jid": jid, "class": "InteropJob", "args": ARGS, "queue": KIQ_QUEUE}


# -- 2. kiq pushes, Ruby runs ------------------------------------------------------------------------------
def test_kiq_pushed_jobs_run_in_ruby(e2e_config: kiq.Config, ruby_sidekiq: RubySidekiq) -> None:
    by_class = RubyEcho.perform_async(*ARGS)
    by_name = kiq.Client(e2e_config).push({"class": "RubyEcho", "args": ARGS, "queue": RUBY_QUEUE})
    assert by_class is not None and by_name is not None
    done = wait_for(lambda: runs_of(e2e_config.redis, RUBY_RUNS, [by_class, by_name]), "Ruby runs", ruby_sidekiq)
    for jid in (by_class, by_name):
        assert done[jid] == {"jid": jid, "class": "RubyEcho", "args": ARGS, "queue": RUBY_QUEUE}


# -- 3. failures: kiq's in Ruby's RetrySet/DeadSet, Ruby's in kiq's -----------------------------------------
def test_kiq_failures_show_in_rubys_retry_and_dead_sets_which_retry_them(
    e2e_config: kiq.Config, ruby_client: RubyClient, start_worker: Callable[..., InProcessWorker]
) -> None:
    r = e2e_config.redis
    worker = start_worker(*KIQ_WORKER_ARGS)
    to_retry = InteropFlakyJob.perform_async("retry me", 1)
    to_kill = InteropFlakyJob.set(retry=0).perform_async("kill me", 2)  # retry: 0 -> straight to the dead set
    assert to_retry is not None and to_kill is not None
    wait_for(lambda: r.zcard("retry") == 1 and r.zcard("dead") == 1, "kiq to record both failures", worker)

    for set_name, jid, args in (("retry", to_retry, ["retry me", 1]), ("dead", to_kill, ["kill me", 2])):
        entry = ruby_client("find", set_name, jid)
        assert entry is not None, f"Ruby's {set_name} set does not list {jid}"
        assert entry["error"] is True
        assert entry["error_class"] == "tests.jobs.interop.InteropError"
        assert entry["error_message"] == f"first attempt of {args}"
        assert entry["retry_count"] == 0
        assert entry["failed_at"] == pytest.approx(time.time(), abs=60)
        assert "retried_at" not in entry
        assert (entry["class"], entry["args"], entry["queue"]) == ("InteropFlakyJob", args, KIQ_QUEUE)
        backtrace = entry["ruby_error_backtrace"]  # kiq's base64(zlib(JSON)), decoded by Ruby
        assert re.fullmatch(r".*tests/jobs/interop\.py:\d+:in `perform'", backtrace[0]), backtrace
        if set_name == "retry":  # the score is when it runs next: InteropFlakyJob.retry_in + Sidekiq's jitter
            assert 3600 <= entry["score"] - entry["failed_at"] <= 3600 + 10
        else:  # the score is when it died
            assert entry["score"] == pytest.approx(entry["failed_at"], abs=5)

    assert ruby_client("retry", "retry", to_retry) == {"retried": True}
    assert ruby_client("retry", "dead", to_kill) == {"retried": True}
    done = wait_for(lambda: runs_of(r, KIQ_RUNS, [to_retry, to_kill]), "kiq to run the retried jobs", worker)
    assert done[to_retry]["args"] == ["retry me", 1] and done[to_kill]["args"] == ["kill me", 2]
    assert r.zcard("retry") == r.zcard("dead") == 0


def test_ruby_failures_show_in_kiqs_retry_and_dead_sets(e2e_config: kiq.Config, ruby_sidekiq: RubySidekiq) -> None:
    client = kiq.Client(e2e_config)
    # Pushed by name, so the pusher gives the options the Ruby class declares (Sidekiq's rule too).
    to_retry = client.push({"class": "RubyFail", "args": ["r", 1], "queue": RUBY_QUEUE, "backtrace": True})
    to_kill = client.push({"class": "RubyFail", "args": ["k", 2], "queue": RUBY_QUEUE, "retry": 0})
    assert to_retry is not None and to_kill is not None
    retries, dead = RetrySet(e2e_config), DeadSet(e2e_config)
    wait_for(lambda: retries.find_job(to_retry) and dead.find_job(to_kill), "Ruby's failures", ruby_sidekiq)

    entry = retries.find_job(to_retry)
    assert entry is not None
    assert (entry.error_class, entry.error_message) == ("RubyInteropError", 'ruby failed with ["r", 1]')
    assert entry.retry_count == 0 and entry.retried_at is None
    assert entry.failed_at is not None and entry.failed_at == pytest.approx(time.time(), abs=60)
    assert (entry.klass, entry.args, entry.queue) == ("RubyFail", ["r", 1], RUBY_QUEUE)
    assert 3600 <= entry.at - entry.failed_at <= 3600 + 10  # RubyFail's sidekiq_retry_in + jitter
    backtrace = entry.error_backtrace  # Sidekiq 6 wraps its base64 every 60 characters; kiq reads it
    assert backtrace is not None and re.fullmatch(r".*tests/ruby/jobs\.rb:\d+:in `perform'", backtrace[0])

    corpse = dead.find_job(to_kill)
    assert corpse is not None
    assert (corpse.error_class, corpse.retry_count, corpse.error_backtrace) == ("RubyInteropError", 0, None)
    assert corpse.at == pytest.approx(corpse.failed_at or 0, abs=5)

    # kiq's retry sends it back to Ruby, which fails it again: now a retry of a retry (count 0 again, as
    # Sidekiq's "retry now" lowers the count by one first).
    assert entry.retry()

    def failed_again() -> SortedEntry | None:
        found = retries.find_job(to_retry)
        return found if found is not None and found.retried_at is not None else None

    again = wait_for(failed_again, "Ruby to fail the retried job again", ruby_sidekiq)
    assert again.retry_count == 0 and again.failed_at == entry.failed_at


# -- 4. process registry and stats -------------------------------------------------------------------------
def test_kiq_process_shows_in_rubys_process_set_and_stats(
    e2e_config: kiq.Config,
    ruby_sidekiq: RubySidekiq,
    ruby_client: RubyClient,
    start_worker: Callable[..., InProcessWorker],
) -> None:
    r = e2e_config.redis
    # The Ruby process adds its own pending counts at each heartbeat; after one beat since the flush it has
    # none left (it runs nothing here), so every change in the stats from now on is kiq's.
    wait_for(lambda: ruby_sidekiq.identity(r), "a Ruby heartbeat", ruby_sidekiq)
    before = ruby_client("stats")
    worker = start_worker(*KIQ_WORKER_ARGS, "-q", "kiq-low", "-c", "3", "--tag", "interop", env=FAST_POLLS)
    InteropJob.perform_async("a")
    InteropJob.perform_async("b")
    InteropFlakyJob.set(retry=False).perform_async("fails")  # no retry: counted as failed, stored nowhere

    def counted() -> dict[str, Any] | None:
        stats = ruby_client("stats")
        return (
            stats if (stats["processed"] - before["processed"], stats["failed"] - before["failed"]) == (3, 1) else None
        )

    counted_stats = wait_for(counted, "Ruby's Stats to count kiq's 3 processed, 1 failed", worker)
    assert counted_stats["retry_size"] == counted_stats["dead_size"] == 0

    token = new_jid()
    InteropBlockJob.perform_async(token)

    def kiq_process(busy: int) -> dict[str, Any] | None:
        processes = ruby_client("processes")
        return next((p for p in processes if p["identity"] == worker.identity and p["busy"] == busy), None)

    process = wait_for(lambda: kiq_process(1), "Ruby's ProcessSet to show kiq busy", worker)
    hostname = socket.gethostname()
    assert re.fullmatch(rf"{re.escape(hostname)}:{worker.pid}:[0-9a-f]{{12}}", process["identity"])
    assert (process["hostname"], process["pid"]) == (hostname, worker.pid)
    assert process["queues"] == [KIQ_QUEUE, "kiq-low"]
    assert (process["concurrency"], process["tag"], process["labels"]) == (3, "interop", [])
    assert (process["quiet"], process["stopping"]) == ("false", False)
    assert process["started_at"] <= process["beat"] == pytest.approx(time.time(), abs=30)
    assert process["rss"] > 0 and process["rtt_us"] >= 0
    stats = ruby_client("stats")
    assert stats["processes_size"] == 2  # the Ruby process and kiq's
    assert stats["workers_size"] == 1  # Sidekiq::Workers#size: the sum of the processes' busy

    # Ruby controls kiq remotely: quiet (TSTP) shows as stopping; stop (TERM) ends the worker.
    assert ruby_client("quiet", process["identity"]) == {"found": True}
    wait_for(lambda: (p := kiq_process(1)) and p["stopping"], "kiq to show as quiet in Ruby", worker)
    r.rpush(RELEASE + token, "go")
    assert ruby_client("stop", process["identity"]) == {"found": True}
    assert worker.wait(30) == 0, worker.output()
    assert token in {run["args"][0] for run in runs(r, KIQ_RUNS).values()}
    assert all(p["identity"] != worker.identity for p in ruby_client("processes"))


def test_ruby_process_shows_in_kiqs_process_set_and_workers(e2e_config: kiq.Config, ruby_sidekiq: RubySidekiq) -> None:
    r = e2e_config.redis
    token = new_jid()
    jid = kiq.Client(e2e_config).push({"class": "RubyBlock", "args": [token], "queue": RUBY_QUEUE})
    try:
        wait_for(lambda: any(p.busy == 1 for p in ProcessSet(e2e_config)), "Ruby busy in ProcessSet", ruby_sidekiq)
        (process,) = list(ProcessSet(e2e_config))
        assert process["pid"] == ruby_sidekiq.proc.pid
        assert (process.queues, process["concurrency"], process.stopping) == ([RUBY_QUEUE], 3, False)
        assert process.identity == ruby_sidekiq.identity(r)
        # Sidekiq 6.4 keeps the running jobs in "<identity>:workers" (7.x: ":work"); kiq reads both.
        works = list(Workers(e2e_config))
        assert [(w.process_id, w.queue, w.payload.get("jid")) for w in works] == [(process.identity, RUBY_QUEUE, jid)]
        assert Workers(e2e_config).size == 1
    finally:
        r.rpush(RUBY_RELEASE + token, "go")
    wait_for(lambda: runs_of(r, RUBY_RUNS, [str(jid)]), "RubyBlock to finish", ruby_sidekiq)


# -- 5. scheduled jobs -------------------------------------------------------------------------------------
def test_kiq_scheduled_jobs_run_in_ruby(
    e2e_config: kiq.Config, ruby_sidekiq: RubySidekiq, ruby_client: RubyClient
) -> None:
    due = time.time() + 3
    jid = RubyEcho.perform_in(3, "later")
    assert jid is not None
    entry = ruby_client("find", "schedule", jid)  # Ruby's ScheduledSet reads kiq's entry
    if entry is not None:  # (unless Ruby's poller already moved it: a slow machine)
        assert entry["score"] == pytest.approx(due, abs=1)
        assert (entry["class"], entry["args"], entry["queue"]) == ("RubyEcho", ["later"], RUBY_QUEUE)
        assert "at" not in entry and "enqueued_at" not in entry
    # no kiq worker runs: only Ruby's poller can move it to its queue
    done = wait_for(lambda: runs_of(e2e_config.redis, RUBY_RUNS, [jid]), "Ruby to run it", ruby_sidekiq)
    assert done[jid]["args"] == ["later"]


def test_ruby_scheduled_jobs_run_in_kiq(
    e2e_config: kiq.Config, ruby_client: RubyClient, start_worker: Callable[..., InProcessWorker]
) -> None:
    r = e2e_config.redis
    far_at = time.time() + 3600
    far = ruby_client("push", {"class": "InteropJob", "args": ["far"], "queue": KIQ_QUEUE, "at": far_at})["jid"]
    entry = ScheduledSet(e2e_config).find_job(far)
    assert entry is not None
    assert entry.at == pytest.approx(far_at) and "at" not in entry.item and entry.enqueued_at is None
    # kiq's poller moves Ruby's entry (one pass as if an hour had passed)
    assert Poller(e2e_config).enqueue_jobs(now=far_at + 1) == 1
    (queued,) = map(loads, r.lrange(f"queue:{KIQ_QUEUE}", 0, -1))
    assert (queued["jid"], queued["args"]) == (far, ["far"])
    assert queued["enqueued_at"] == pytest.approx(time.time(), abs=60)

    soon = ruby_client("perform_in", 1, "soon")["jid"]  # InteropJob.perform_in(1, "soon")
    worker = start_worker(*KIQ_WORKER_ARGS, env=FAST_POLLS)
    done = wait_for(lambda: runs_of(r, KIQ_RUNS, [far, soon]), "kiq to run both", worker)
    assert (done[far]["args"], done[soon]["args"]) == (["far"], ["soon"])


# -- 5. a Ruby producer pushes arguments a typed parameter cannot read -----------------------------------------------
def test_a_ruby_pushed_payload_a_typed_parameter_cannot_read_ends_in_retry_with_a_clear_error(
    e2e_config: kiq.Config, ruby_client: RubyClient, start_worker: Callable[..., InProcessWorker]
) -> None:
    r = e2e_config.redis
    good = {"when": "2026-01-02T03:04:05Z", "at": "12:30:15", "wait": "PT5S", "color": "red", "totals": {},
            "order": {"id": "8f14e45f-ceea-467a-9575-4bc0c8e5b1a2", "total": "1", "placed": "2026-01-02T03:04:05Z",
                      "lines": []},
            "line": {"sku": "8f14e45f-ceea-467a-9575-4bc0c8e5b1a2", "day": "2026-01-02"}}  # fmt: skip
    # Sidekiq::Client.push as a Ruby app writes it: a Ruby Hash where a UUID string is expected, and a Ruby Time
    # without its zone where an aware datetime is
    pushed = {
        "hash-for-uuid": {"args": ["hash-for-uuid", {"id": 1}, "1.5"], "kwargs": good},
        "naive-when": {"args": ["naive-when", good["order"]["id"], 2], "kwargs": {**good, "when": "2026-01-02 03:04"}},
    }
    jids = {key: ruby_client("push", {"class": "TypedSync", "queue": "default", **job})["jid"]
            for key, job in pushed.items()}  # fmt: skip
    worker = start_worker("-r", "tests.jobs.typed", "-c", "2", env=FAST_POLLS)
    wait_for(lambda: r.zcard("retry") == 2 or None, "the two jobs in the retry set", worker)
    assert worker.stop() == 0
    retries = {job["jid"]: job for job in map(loads, r.zrange("retry", 0, -1))}
    assert {job["error_class"] for job in retries.values()} == {"kiq.errors.ArgumentError"}
    uuid_error = retries[jids["hash-for-uuid"]]["error_message"]
    assert uuid_error.startswith("TypedSync: argument 'id' (args[1] of the payload) = {'id': 1} cannot be read as UUID")
    when_error = retries[jids["naive-when"]]["error_message"]
    assert "argument 'when' (kwargs['when'] of the payload) = '2026-01-02 03:04'" in when_error, when_error
    assert retries[jids["hash-for-uuid"]]["args"] == pushed["hash-for-uuid"]["args"]  # kept as Ruby wrote it
