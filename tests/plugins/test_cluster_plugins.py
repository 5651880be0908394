"""The plugins on a real Redis Cluster, in both key layouts: a unique job's lock held at the push and released by a
worker, each limiter kind limiting (sync and asyncio) and listed, periodic ticks enqueued once by two schedulers,
results kept and read, expired jobs dropped and counted, the metrics port's queue sizes, a tracked task, ActiveJob
pushes and the OTel plugin's spans.

Runs when ``KIQ_TEST_CLUSTER_URL`` names a cluster (``redis+cluster://127.0.0.1:7000``; ``bash cluster.sh start``
makes one), in the layouts of ``KIQ_TEST_CLUSTER_SLOTS`` (``one``, ``queue``, or both comma-separated: the default).
The cluster is flushed before each test."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import kiq
import kiq.plugins.otel as otel
from kiq import config as kiq_config
from kiq.plugins import activejob, limiter, results
from kiq.plugins.expiry import expired_counts
from kiq.plugins.periodic import PeriodicJob, periodic_statuses
from kiq.plugins.periodic import web as periodic_web
from kiq.plugins.periodic.scheduler import Scheduler
from kiq.plugins.periodic.store import LAST_TICKS, publish
from kiq.plugins.unique import dropped_counts, lock_holder, lock_key
from kiq.tabs import Table, TabRequest, When
from tests.jobs import expiry as expiry_jobs
from tests.jobs import tracking as tracking_jobs
from tests.jobs import unique as unique_jobs
from tests.jobs.periodic import Tick
from tests.jobs.results import Price
from tests.plugins.metrics.support import free_port, get, scrape, value
from tests.support import FAST, WorkerProcess, wait_until
from tests.tracking_support import track

CLUSTER_URL = os.environ.get("KIQ_TEST_CLUSTER_URL")
LAYOUTS = os.environ.get("KIQ_TEST_CLUSTER_SLOTS") or "one,queue"

pytestmark = pytest.mark.cluster
T = TypeVar("T")


@pytest.fixture(params=LAYOUTS.split(","))
def cluster(request: pytest.FixtureRequest) -> Iterator[kiq.Config]:
    """A Config on the flushed cluster in one layout, the process default meanwhile."""
    if not CLUSTER_URL:
        pytest.skip("KIQ_TEST_CLUSTER_URL is not set (a Redis Cluster, redis+cluster://host:port)")
    config = kiq.Config(redis_url=CLUSTER_URL, slots=request.param)
    config.redis.flushall()  # every primary
    previous = kiq_config._default
    kiq_config.set_default_config(config)
    yield config
    kiq_config._default = previous
    config.redis.close()


@pytest.fixture
def start_worker(cluster: kiq.Config, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """``start_worker(*args, plugins=...)``: a real ``kiq worker`` on the cluster, in the test's layout."""
    started: list[WorkerProcess] = []

    def start(*args: str, plugins: str, **env: str) -> WorkerProcess:
        assert CLUSTER_URL is not None
        settings = {**FAST, "KIQ_SLOTS": str(cluster.slots), "KIQ_PLUGINS": plugins, **env}
        worker = WorkerProcess(args, CLUSTER_URL, tmp_path / f"worker-{len(started)}.log", settings)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def run_async(config: kiq.Config, work: Callable[[], Awaitable[T]]) -> T:
    """``work()`` on a fresh event loop, whose cluster client is closed after it."""

    async def main() -> T:
        try:
            return await work()
        finally:
            # not AsyncClient.close(): it closes a plain client's pool, which a cluster's client has not (one per node)
            await kiq.AsyncClient(config).redis.aclose()

    return asyncio.run(main())


def shared(config: kiq.Config, name: str) -> str:
    """The key of ``name`` in kiq's shared slot: hash-tagged in both layouts."""
    key = kiq.keyspace(config.redis).key(name)
    assert key == "{kiq}" + name
    return key


# -- unique ---------------------------------------------------------------------------------------------------------
def test_a_unique_jobs_lock_is_held_from_the_push_and_released_by_the_worker(
    cluster: kiq.Config, start_worker: Callable[..., WorkerProcess]
) -> None:
    cluster.add_plugin("unique")
    jid = unique_jobs.Once.perform_async(1)
    assert jid is not None and unique_jobs.Once.perform_async(1) is None
    assert cluster.redis.get(shared(cluster, lock_key("UniqueOnce", "default", [1]))) == jid
    assert lock_holder(unique_jobs.Once, [1]) == jid and dropped_counts() == {"UniqueOnce": 1}
    worker = start_worker("-r", "tests.jobs.unique", plugins="unique")
    wait_until(lambda: lock_holder(unique_jobs.Once, [1]) is None, 30, message=f"the lock released\n{worker.output()}")
    assert cluster.redis.lrange(unique_jobs.RUNS, 0, -1) == [jid]
    assert unique_jobs.Once.perform_async(1) is not None


# -- limiters ---------------------------------------------------------------------------------------------------------
def test_each_limiter_kind_limits_on_the_cluster_and_is_listed(cluster: kiq.Config) -> None:
    gate = limiter.concurrent("gate", 2, wait_timeout=0, config=cluster)
    window = limiter.window("window", 3, 60, wait_timeout=0, config=cluster)
    bucket = limiter.bucket("bucket", 2, 60, wait_timeout=0, config=cluster)
    leases = [gate.acquire(), gate.acquire()]
    for kind, room in ((window, 3), (bucket, 2)):
        for _ in range(room):
            kind.acquire()
    for full in (gate, window, bucket):
        with pytest.raises(limiter.OverLimit):
            full.acquire()
    cluster.redis.hincrby(shared(cluster, "kiq:limiter:overrated"), "window:window", 5)
    listed = {(state.kind, state.name): (state.in_use, state.overrated) for state in limiter.limiter_states(cluster)}
    assert listed == {("concurrent", "gate"): (2, 0), ("window", "window"): (3, 5), ("bucket", "bucket"): (2, 0)}
    assert cluster.redis.zcard(shared(cluster, "kiq:limiter:concurrent:gate")) == 2
    leases[0].release()
    with gate:  # the slot given back is taken again
        assert cluster.redis.zcard(shared(cluster, "kiq:limiter:concurrent:gate")) == 2
    assert cluster.redis.zcard(shared(cluster, "kiq:limiter:concurrent:gate")) == 1


@pytest.mark.parametrize("make", [limiter.concurrent, limiter.window, limiter.bucket])
def test_each_limiter_kind_limits_from_asyncio_on_the_cluster(cluster: kiq.Config, make: Any) -> None:
    one = make(f"async-{make.__name__}", 1, wait_timeout=0, config=cluster)

    async def twice() -> None:
        async with one:
            with pytest.raises(limiter.OverLimit):
                await one.acquire_async()

    run_async(cluster, twice)
    (state,) = limiter.limiter_states(cluster)
    assert (state.name, state.limit) == (f"async-{make.__name__}", 1)


# -- periodic ---------------------------------------------------------------------------------------------------------
def test_two_schedulers_enqueue_each_tick_of_a_periodic_job_once(cluster: kiq.Config) -> None:
    every_second = PeriodicJob("* * * * * *", "PeriodicTick", ["cluster"])
    other = kiq.Config(redis_url=cluster.redis_url, slots=cluster.slots)  # a second process's own client
    schedulers = [Scheduler(config, [(every_second, Tick)]) for config in (cluster, other)]
    queue = kiq.keyspace(cluster.redis).queue("default")
    for scheduler in schedulers:
        scheduler.start()
    try:
        wait_until(lambda: cluster.redis.llen(queue) >= 3, 15, interval=0.1, message="three ticks enqueued")
    finally:
        for scheduler in schedulers:
            scheduler.stop()
        other.redis.close()
    ticks = Counter(json.loads(raw)["periodic_at"] for raw in cluster.redis.lrange(queue, 0, -1))
    assert set(ticks.values()) == {1}, ticks
    assert float(cluster.redis.hget(shared(cluster, LAST_TICKS), every_second.id)) == max(ticks)
    view = periodic_web.render(cluster, lambda: [every_second], TabRequest("", {}, cluster))
    (idle,) = [block for block in view.blocks if isinstance(block, Table) and block.rows]  # declared, not published
    assert idle.rows[0][-1] == When(max(ticks))
    publish(cluster.redis, [every_second], time.time() + 60)
    (status,) = periodic_statuses(cluster)
    assert status.last_run == max(ticks)


# -- results and expiry -----------------------------------------------------------------------------------------------
def test_a_workers_result_is_stored_and_read_sync_and_async(
    cluster: kiq.Config, start_worker: Callable[..., WorkerProcess]
) -> None:
    jid = Price.perform_async(4)
    assert jid is not None
    worker = start_worker("-r", "tests.jobs.results", plugins="results")
    expected = {"number": 4, "price": 6.0, "tags": ["a", "b"]}
    assert results.result(jid, wait=30) == expected, worker.output()
    assert 0 < cluster.redis.pttl(shared(cluster, f"kiq:result:{jid}")) <= 60_000
    assert run_async(cluster, lambda: results.aio.result(jid)) == expected


def test_a_job_past_its_deadline_is_dropped_and_counted(
    cluster: kiq.Config, start_worker: Callable[..., WorkerProcess]
) -> None:
    cluster.add_plugin("expiry")
    late = expiry_jobs.Quote.set(expires_at=time.time() - 1).perform_async(1)
    fresh = expiry_jobs.Quote.perform_async(2)
    worker = start_worker("-r", "tests.jobs.expiry", "-c", "1", plugins="expiry")
    wait_until(lambda: expired_counts() == {"ExpiryQuote": 1}, 30, message=f"the late job dropped\n{worker.output()}")
    wait_until(lambda: cluster.redis.lrange(expiry_jobs.RUNS, 0, -1) == [fresh], 30, message="the fresh job run")
    assert late not in cluster.redis.lrange(expiry_jobs.RUNS, 0, -1)
    assert cluster.redis.hgetall(shared(cluster, "kiq:expiry:expired")) == {"ExpiryQuote": "1"}


# -- metrics ----------------------------------------------------------------------------------------------------------
def test_the_metrics_port_reads_the_queues_and_sets_of_the_cluster(
    cluster: kiq.Config, start_worker: Callable[..., WorkerProcess]
) -> None:
    client = kiq.Client(cluster)
    for queue, count in (("alpha", 3), ("beta", 2), ("gamma", 1)):  # in the queue layout, in slots of their own
        client.push_bulk({"class": "Elsewhere", "queue": queue, "args": [[n] for n in range(count)]})
    client.push({"class": "Elsewhere", "args": [], "at": time.time() + 3600})
    cluster.redis.hincrby(shared(cluster, "kiq:limiter:overrated"), "bucket:api", 4)  # a plugin's fleet reading
    port = free_port()
    worker = start_worker(
        "-r", "tests.jobs.operations", "-q", "unused", "--metrics-port", str(port), plugins="metrics,limiter"
    )
    wait_until(lambda: get(port, "/livez", timeout=2)[0] == 200, 30, message=f"the metrics port\n{worker.output()}")
    samples = scrape(port)
    assert value(samples, "kiq_up") == 1
    sizes = {queue: value(samples, "kiq_queue_size", queue=queue) for queue in ("alpha", "beta", "gamma")}
    assert sizes == {"alpha": 3, "beta": 2, "gamma": 1}
    assert value(samples, "kiq_queue_latency_seconds", queue="alpha") < 600
    assert value(samples, "kiq_scheduled_set_size") == 1 and value(samples, "kiq_retry_set_size") == 0
    assert value(samples, "kiq_limiter_reschedules_total", limiter="bucket:api") == 4
    assert get(port, "/readyz")[0] == 200  # the cluster answers its PING


# -- tracking ---------------------------------------------------------------------------------------------------------
def test_a_tracked_task_runs_and_converges_on_the_cluster(
    cluster: kiq.Config, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'tracking.db'}"
    tracker = track(cluster, database)  # the tracking plugin keeps nothing in Redis: its pushes go through the keyspace
    try:
        task_id = tracker.create_task(tracking_jobs.SlowEnroll, [[n, "fail" if n == 3 else "ok"] for n in range(6)])
        worker = start_worker("-r", "tests.jobs.tracking", plugins="tracking", KIQ_TRACKING_DATABASE_URL=database)

        def task() -> dict[str, Any]:
            found = tracker.task(task_id, with_events=False)
            assert found is not None
            return found

        wait_until(lambda: task()["complete"], 30, message=f"the task to complete\n{worker.output()}")
        assert task()["counts"] == {"enqueued": 0, "working": 0, "finished": 5, "failed": 1, "error": 0}
        assert cluster.redis.llen(tracking_jobs.DONE) == 6
    finally:
        tracker.writer.close(5)
        tracker.store.engine.dispose()


# -- ActiveJob and OTel -----------------------------------------------------------------------------------------------
def test_an_activejob_push_lands_in_the_queues_list(cluster: kiq.Config) -> None:
    jid = activejob.perform_later("ReportJob", 7, queue="reports")
    async_jid = run_async(cluster, lambda: activejob.job("ReportJob").aio.perform_later(8))
    keys = kiq.keyspace(cluster.redis)
    (report,) = [json.loads(raw) for raw in cluster.redis.lrange(keys.queue("reports"), 0, -1)]
    (default,) = [json.loads(raw) for raw in cluster.redis.lrange(keys.queue("default"), 0, -1)]
    assert (report["jid"], report["wrapped"], report["args"][0]["arguments"]) == (jid, "ReportJob", [7])
    assert (default["jid"], default["args"][0]["arguments"]) == (async_jid, [8])
    assert cluster.redis.smembers(keys.key("queues")) == {"reports", "default"}


def test_the_otel_plugin_traces_a_push_to_the_cluster(cluster: kiq.Config) -> None:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    otel.instrument(cluster, tracer_provider=tracer_provider, meter_provider=MeterProvider([InMemoryMetricReader()]))
    jid = kiq.Client(cluster).push({"class": "Traced", "args": [1]})
    (span,) = spans.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["messaging.message.id"] == jid
    nodes = {(node.host, node.port) for node in cluster.redis.get_nodes()}  # type: ignore[attr-defined]
    assert (span.attributes["server.address"], span.attributes["server.port"]) in nodes
    assert cluster.redis.llen(kiq.keyspace(cluster.redis).queue("default")) == 1
