"""The API, iteration state, dashboard and CLI on the real clusters (the ``cluster`` mark's 4 targets: Redis 7 and
Valkey 9, both layouts): each reads and writes its keys through the keyspace (``{kiq}...``, ``queue:{<name>}``),
and nothing sends two slots' keys in one script or transaction.

Queues ``alpha`` and ``beta`` hash to different slots, so in the queue layout every test that uses both crosses slots.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from redis.crc import key_slot

import kiq
import kiq.ext
from kiq.api import DeadSet, ProcessSet, Queue, RetrySet, ScheduledSet, Stats, Workers
from kiq.api.fleet import FleetGauges
from kiq.api.iterations import iteration_states
from kiq.async_client import async_redis
from kiq.contrib.web import asgi_app
from kiq.iteration import state
from kiq.server.dead import replay_command
from tests.cluster_support import cli
from tests.jobs.basic import Record, Sleepy
from tests.jobs.iteration import HOOKS, SEEN, Walk
from tests.jobs.iteration import QUEUE as ITERATION_QUEUE
from tests.jobs.retry import ATTEMPTS, AlwaysFails
from tests.support import FAST, WorkerProcess, wait_until

pytestmark = pytest.mark.cluster(only=True, every_target=True)

ORIGIN = "http://testserver"


def job(jid: str, queue: str = "default", **fields: Any) -> dict[str, Any]:
    now = time.time()
    return {"class": "Record", "args": [jid], "jid": jid, "queue": queue, "retry": True, "created_at": now - 5,
            "enqueued_at": now - 5, **fields}  # fmt: skip


def failed(jid: str, queue: str = "default") -> dict[str, Any]:
    return job(jid, queue, retry_count=1, error_class="RuntimeError", error_message="boom", failed_at=time.time())


def queued_jids(name: str) -> list[str]:
    return [str(record.jid) for record in Queue(name)]


def test_the_queues_of_the_layout_fall_in_their_slots(config: kiq.Config) -> None:
    keys = kiq.ext.keyspace(config.redis)
    assert keys.cluster and keys.slots == config.slots
    slots = {key_slot(keys.queue(name).encode()) for name in ("alpha", "beta")}
    assert len(slots) == (2 if config.slots == "queue" else 1)
    assert key_slot(keys.key("retry").encode()) == key_slot(keys.key("queues").encode())


def test_queues_size_latency_page_delete_pause_and_clear(config: kiq.Config) -> None:
    for name in ("alpha", "beta"):
        kiq.Client(config).push_bulk({"class": "Record", "queue": name, "args": [[f"{name}-{n}"] for n in range(3)]})
    assert [queue.name for queue in Queue.all()] == ["alpha", "beta"]
    alpha = Queue("alpha")
    assert alpha.key == kiq.ext.keyspace(config.redis).queue("alpha")
    assert alpha.size == 3 and 0 <= alpha.latency < 60
    records = list(alpha)
    assert [record.args for record in records] == [["alpha-2"], ["alpha-1"], ["alpha-0"]]  # newest first
    assert [record.args for record in alpha.page(1, 5)] == [["alpha-1"], ["alpha-0"]]
    assert records[0].delete() and alpha.size == 2
    assert alpha.find_job(str(records[1].jid)) is not None

    assert alpha.pause() and alpha.paused and not Queue("beta").paused
    assert alpha.unpause() and not alpha.paused
    assert alpha.pause()
    assert alpha.clear() == 2 and alpha.size == 0
    # cleared, it leaves the ``queues`` set; paused, it stays listed so it can be unpaused
    assert [queue.name for queue in Queue.all()] == ["alpha", "beta"]
    assert alpha.unpause()
    assert [queue.name for queue in Queue.all()] == ["beta"]
    Record.set(queue="alpha").perform_async("again")  # the next push lists it again
    assert [queue.name for queue in Queue.all()] == ["alpha", "beta"]

    stats = Stats()
    assert stats.queues == {"beta": 3, "alpha": 1} and stats.enqueued == 4
    config.queues = ["alpha", "beta"]  # known queues: labels of their own
    gauges = {(reading.name, reading.labels): reading.value for reading in FleetGauges(config).readings()}
    assert gauges["kiq_queue_size", (("queue", "beta"),)] == 3 and gauges["kiq_queue_size", (("queue", "alpha"),)] == 1


def test_retry_set_iterate_find_search_retry_kill_delete_clear(config: kiq.Config) -> None:
    retries = RetrySet()
    due = time.time() + 3600
    for n, queue in enumerate(("alpha", "beta", "alpha", "beta", "alpha")):
        retries.schedule(due + n, failed(f"r{n}", queue))
    assert retries.size == 5 and [entry.jid for entry in retries] == ["r4", "r3", "r2", "r1", "r0"]
    assert [entry.jid for entry in retries.page(0, 2, newest_first=False)] == ["r0", "r1"]
    found = retries.search('"r3"')  # the SEARCH script, declared in kiq's shared slot
    assert [entry.jid for entry in found.entries] == ["r3"] and found.resume is None
    assert [entry.jid for entry in retries.fetch(due + 1)] == ["r1"]

    entry = retries.find_job("r0")
    assert entry is not None and entry.retry()  # out of the set, into its queue
    assert queued_jids("alpha") == ["r0"] and retries.find_job("r0") is None
    assert retries.retry_by_jid("r1") and queued_jids("beta") == ["r1"]
    kill = retries.find_job("r2")
    assert kill is not None and kill.kill()
    assert [entry.jid for entry in DeadSet()] == ["r2"]
    assert retries.delete_by_jid("r3") and retries.size == 1
    later = retries.find_job("r4")
    assert later is not None and later.reschedule(due + 100) and retries.fetch(due + 100)[0].jid == "r4"
    assert retries.clear() == 1 and retries.size == 0
    assert Stats().retry_size == 0 and Stats().dead_size == 1


def test_dead_and_scheduled_sets(config: kiq.Config) -> None:
    dead = DeadSet()
    for n, queue in enumerate(("alpha", "beta")):
        dead.kill(json.dumps(failed(f"d{n}", queue)), notify_failure=False)
    assert dead.size == 2 and dead.retry_all() == 2 and dead.size == 0
    assert replay_command(config, "{}")[:2] == ["ZADD", dead.key]  # what a log line tells an operator to run
    assert queued_jids("alpha") == ["d0"] and queued_jids("beta") == ["d1"]

    Record.set(queue="beta").perform_in(3600, "later")
    Record.set(queue="alpha").perform_in(7200, "much later")
    scheduled = ScheduledSet()
    assert [entry.args for entry in scheduled] == [["much later"], ["later"]]
    soon = next(iter(scheduled))
    assert soon.add_to_queue() and [record.args for record in Queue("alpha")] == [["much later"], ["d0"]]
    assert Stats().scheduled_size == 1 and scheduled.clear() == 1


def test_iteration_state_save_load_cancel_clear(config: kiq.Config) -> None:
    redis = config.redis
    assert state.key_of(redis, "j1") == kiq.ext.keyspace(redis).key("it-j1")
    assert not state.flush(redis, "j1", 1, {"id": 7}, 0.5)
    assert redis.hget(kiq.ext.keyspace(redis).key("it-j1"), "c") == '{"id":7}'
    saved = state.read(redis, "j1")
    assert saved is not None and saved.cursor == {"id": 7} and saved.executions == 1 and not saved.cancelled
    assert kiq.cancel("j1") > 0 and state.flush(redis, "j1", 1, {"id": 8}, 0.5)  # the flush tells it was cancelled
    assert set(iteration_states(["j1", "nope"])) == {"j1"}
    state.clear(redis, "j1")
    assert state.read(redis, "j1") is None

    async def in_asyncio() -> tuple[state.IterationState | None, int]:
        client = async_redis(config)
        await state.aflush(client, "j2", 2, [1, 2], 1.0)
        return await state.aread(client, "j2"), await kiq.cancel.aio("j2")

    read_async, cancelled_at = asyncio.run(in_asyncio())
    assert read_async is not None and read_async.cursor == [1, 2] and cancelled_at > 0
    assert state.read(redis, "j2") is not None


@pytest.fixture
def worker(e2e_config: kiq.Config, start_worker: Callable[..., WorkerProcess]) -> WorkerProcess:
    """A real ``kiq worker`` on the cluster, in the test's layout, reading alpha then beta."""
    env = {**FAST, "KIQ_POLL_INTERVAL": "0.5", "KIQ_ITERATION_FLUSH_INTERVAL": "0.1"}
    jobs = ("-r", "tests.jobs.basic", "-r", "tests.jobs.retry", "-r", "tests.jobs.iteration")
    return start_worker(*jobs, "-q", "alpha", "-q", "beta", "-q", ITERATION_QUEUE, "-c", "3", "-t", "1", env=env)


def test_a_worker_runs_retries_and_buries_jobs_and_the_api_sees_it(
    e2e_config: kiq.Config, worker: WorkerProcess
) -> None:
    for n in range(4):
        Record.set(queue=("alpha", "beta")[n % 2]).perform_async(f"run-{n}")
    AlwaysFails.set(queue="beta", retry=1).perform_async("doomed")
    redis = e2e_config.redis
    wait_until(lambda: redis.llen("order") == 4, 30, message="the four Record jobs")
    # fails, waits in the retry set, the poller enqueues it again, fails again: dead
    wait_until(lambda: DeadSet().size == 1, 60, message=f"AlwaysFails dead\n{worker.output()}")
    assert redis.llen(ATTEMPTS) == 2
    assert next(iter(DeadSet())).item["retry_count"] == 1 and RetrySet().size == 0

    processes = wait_until(lambda: list(ProcessSet()), 30, message="the worker's heartbeat")
    assert [process["pid"] for process in processes] == [worker.pid]
    assert ProcessSet().size == 1 and processes[0].state == "running"
    wait_until(lambda: Stats().processed == 6, 30, message="the counters flushed by the heartbeat")
    assert Stats().failed == 2 and Stats().history(1)["processed"] == {time.strftime("%Y-%m-%d", time.gmtime()): 6}

    jid = Sleepy.set(queue="alpha").perform_async(30)
    works = wait_until(lambda: list(Workers()), 30, message="the Sleepy job in the process's work hash")
    assert [work.payload["jid"] for work in works] == [jid] and works[0].queue == "alpha"
    # a beat writes the work hash, then (after a PING that times the round trip) the busy count these two read
    wait_until(lambda: Workers().size == 1 and Stats().workers_size == 1, 30, message="the heartbeat's busy count")
    busy_page = Dashboard(e2e_config).get("/busy")
    assert busy_page.status_code == 200 and jid in busy_page.text

    assert ProcessSet().stop(str(processes[0].identity)) == 1  # the signals key, read by the heartbeat
    assert worker.wait(30) == 0
    assert [record.jid for record in Queue("alpha")] == [jid]  # the running job went back to its queue
    wait_until(lambda: ProcessSet().size == 0, 10, message="the stopped process unregistered")


def test_a_worker_walks_an_iterable_job_and_kiq_cancel_stops_it(e2e_config: kiq.Config, worker: WorkerProcess) -> None:
    redis = e2e_config.redis
    jid = Walk.perform_async(10_000, 0.01)
    saved = wait_until(lambda: (found := state.read(redis, jid)) is not None and found.cursor, 30, message="a flush")
    assert saved  # the worker saved its cursor in {kiq}it-<jid>
    assert kiq.cancel(jid) > 0
    wait_until(lambda: "cancel" in redis.lrange(HOOKS, 0, -1), 30, message=f"on_cancel\n{worker.output()}")
    wait_until(lambda: state.read(redis, jid) is None, 30, message="the state cleared at the end")
    assert int(redis.hlen(SEEN)) < 10_000 and RetrySet().size == 0 and DeadSet().size == 0


class Dashboard:
    """The dashboard's ASGI app through httpx (one event loop per request), keeping its cookies (the CSRF one)."""

    def __init__(self, config: kiq.Config) -> None:
        self.app = asgi_app(config)
        self.cookies = httpx.Cookies()

    def get(self, path: str) -> httpx.Response:
        return self._send("GET", path)

    def post(self, path: str, fields: dict[str, str]) -> httpx.Response:
        csrf = re.search(r'name="csrf" value="([^"]+)"', self.get("/queues").text)
        assert csrf is not None, "a CSRF token in the Queues page's forms"
        body = urlencode({"csrf": csrf[1], **fields}).encode()
        return self._send("POST", path, content=body, headers={"Content-Type": "application/x-www-form-urlencoded"})

    def _send(self, method: str, path: str, **options: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url=ORIGIN, cookies=self.cookies) as client:
                response = await client.request(method, path, **options)
                self.cookies = client.cookies
                return response

        return asyncio.run(send())


def test_dashboard_pages_answer_on_a_cluster(config: kiq.Config) -> None:
    Record.set(queue="alpha").perform_async("waiting")
    Record.set(queue="beta").perform_in(3600, "later")
    RetrySet().schedule(time.time() + 600, failed("r1", "beta"))
    DeadSet().kill(json.dumps(failed("d1", "alpha")), notify_failure=False)
    get = Dashboard(config).get
    for path, shows in {
        "/": "Dashboard",
        "/stats.json": '"enqueued":1',
        "/busy": "Busy",
        "/queues": "alpha",
        "/queues/alpha": "waiting",
        "/retries": "r1",
        "/scheduled": "later",
        "/dead": "d1",
    }.items():
        answer = get(path)
        assert answer.status_code == 200, (path, answer.text[:500])
        assert shows in answer.text, path


def test_dashboard_actions_on_a_cluster(config: kiq.Config) -> None:
    kiq.Client(config).push_bulk({"class": "Record", "queue": "alpha", "args": [["a"], ["b"]]})
    Record.set(queue="beta").perform_async("c")
    DeadSet().kill(json.dumps(failed("d1", "beta")), notify_failure=False)
    RetrySet().schedule(time.time() + 600, failed("r1", "alpha"))
    site = Dashboard(config)
    assert site.post("/queues/alpha", {"op": "clear"}).status_code == 303
    assert Queue("alpha").size == 0 and [queue.name for queue in Queue.all()] == ["beta"]
    assert site.post("/queues/beta", {"op": "pause"}).status_code == 303 and Queue("beta").paused
    assert site.post("/dead", {"action": "retry_all"}).status_code == 303
    assert DeadSet().size == 0 and queued_jids("beta")[0] == "d1"
    assert site.post("/retries", {"action": "kill_all"}).status_code == 303
    assert RetrySet().size == 0 and [entry.jid for entry in DeadSet()] == ["r1"]


def test_cli_queues_stats_and_sets_on_a_cluster(config: kiq.Config) -> None:
    Record.set(queue="alpha").perform_async("one")
    kiq.Client(config).push_bulk({"class": "Record", "queue": "beta", "args": [["two"], ["three"]]})
    RetrySet().schedule(time.time() + 600, failed("r1", "beta"))
    ScheduledSet().schedule(time.time() + 600, job("s1", "alpha"))
    DeadSet().kill(json.dumps(failed("d1", "alpha")), notify_failure=False)

    assert {row["name"]: row["size"] for row in cli(config, "queues")} == {"alpha": 1, "beta": 2}
    stats = cli(config, "stats")
    assert stats["enqueued"] == 3 and stats["retry_size"] == 1
    for command, jid in (("retries", "r1"), ("scheduled", "s1"), ("dead", "d1")):
        assert [row["jid"] for row in cli(config, command)] == [jid], command
