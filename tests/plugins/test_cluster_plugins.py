"""The plugins on the real clusters (the ``cluster`` mark's 4 targets: Redis 7 and Valkey 9, both key layouts): a
unique job's lock held at the push and released by a worker, each limiter kind limiting (sync and asyncio) and listed,
periodic ticks enqueued once by two schedulers, results kept and read, expired jobs dropped and counted, the metrics
port's queue sizes, a tracked task, ActiveJob pushes and the OTel plugin's spans."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import kiq
import kiq.ext
import kiq.plugins.otel as otel
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

pytestmark = pytest.mark.cluster(only=True)
T = TypeVar("T")
StartWorker = Callable[..., WorkerProcess]


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
    key = kiq.ext.keyspace(config.redis).key(name)
    assert key == "{kiq}" + name
    return key


# -- unique ---------------------------------------------------------------------------------------------------------
def test_a_unique_jobs_lock_is_held_from_the_push_and_released_by_the_worker(
    e2e_config: kiq.Config, start_worker: StartWorker
) -> None:
    e2e_config.add_plugin("unique")
    jid = unique_jobs.Once.perform_async(1)
    assert jid is not None and unique_jobs.Once.perform_async(1) is None
    assert e2e_config.redis.get(shared(e2e_config, lock_key("UniqueOnce", "default", [1]))) == jid
    assert lock_holder(unique_jobs.Once, [1]) == jid and dropped_counts() == {"UniqueOnce": 1}
    worker = start_worker("-r", "tests.jobs.unique", env={**FAST, "KIQ_PLUGINS": "unique"})
    wait_until(lambda: lock_holder(unique_jobs.Once, [1]) is None, 30, message=f"the lock released\n{worker.output()}")
    assert e2e_config.redis.lrange(unique_jobs.RUNS, 0, -1) == [jid]
    assert unique_jobs.Once.perform_async(1) is not None


# -- limiters ---------------------------------------------------------------------------------------------------------
def test_each_limiter_kind_limits_on_the_cluster_and_is_listed(config: kiq.Config) -> None:
    gate = limiter.concurrent("gate", 2, wait_timeout=0, config=config)
    window = limiter.window("window", 3, 60, wait_timeout=0, config=config)
    bucket = limiter.bucket("bucket", 2, 60, wait_timeout=0, config=config)
    leases = [gate.acquire(), gate.acquire()]
    for kind, room in ((window, 3), (bucket, 2)):
        for _ in range(room):
            kind.acquire()
    for full in (gate, window, bucket):
        with pytest.raises(limiter.OverLimit):
            full.acquire()
    config.redis.hincrby(shared(config, "kiq:limiter:overrated"), "window:window", 5)
    listed = {(state.kind, state.name): (state.in_use, state.overrated) for state in limiter.limiter_states(config)}
    assert listed == {("concurrent", "gate"): (2, 0), ("window", "window"): (3, 5), ("bucket", "bucket"): (2, 0)}
    assert config.redis.zcard(shared(config, "kiq:limiter:concurrent:gate")) == 2
    leases[0].release()
    with gate:  # the slot given back is taken again
        assert config.redis.zcard(shared(config, "kiq:limiter:concurrent:gate")) == 2
    assert config.redis.zcard(shared(config, "kiq:limiter:concurrent:gate")) == 1


@pytest.mark.parametrize("make", [limiter.concurrent, limiter.window, limiter.bucket])
def test_each_limiter_kind_limits_from_asyncio_on_the_cluster(config: kiq.Config, make: Any) -> None:
    # a window or bucket of a minute: one of a second could pass on a loaded machine between the two acquires
    interval: dict[str, float] = {} if make is limiter.concurrent else {"interval": 60.0}
    one = make(f"async-{make.__name__}", 1, wait_timeout=0, config=config, **interval)

    async def twice() -> None:
        async with one:
            with pytest.raises(limiter.OverLimit):
                await one.acquire_async()

    run_async(config, twice)
    (state,) = limiter.limiter_states(config)
    assert (state.name, state.limit) == (f"async-{make.__name__}", 1)


# -- periodic ---------------------------------------------------------------------------------------------------------
def test_two_schedulers_enqueue_each_tick_of_a_periodic_job_once(config: kiq.Config) -> None:
    every_second = PeriodicJob("* * * * * *", "PeriodicTick", ["cluster"])
    other = kiq.Config(redis_url=config.redis_url, slots=config.slots)  # a second process's own client
    schedulers = [Scheduler(each, [(every_second, Tick)]) for each in (config, other)]
    queue = kiq.ext.keyspace(config.redis).queue("default")
    for scheduler in schedulers:
        scheduler.start()
    try:
        wait_until(lambda: config.redis.llen(queue) >= 3, 15, interval=0.1, message="three ticks enqueued")
    finally:
        for scheduler in schedulers:
            scheduler.stop()
        other.redis.close()
    ticks = Counter(json.loads(raw)["periodic_at"] for raw in config.redis.lrange(queue, 0, -1))
    assert set(ticks.values()) == {1}, ticks
    assert float(config.redis.hget(shared(config, LAST_TICKS), every_second.id)) == max(ticks)
    view = periodic_web.render(config, lambda: [every_second], TabRequest("", {}, config))
    (idle,) = [block for block in view.blocks if isinstance(block, Table) and block.rows]  # declared, not published
    assert idle.rows[0][-1] == When(max(ticks))
    publish(config.redis, [every_second], time.time() + 60)
    (status,) = periodic_statuses(config)
    assert status.last_run == max(ticks)


# -- results and expiry -----------------------------------------------------------------------------------------------
def test_a_workers_result_is_stored_and_read_sync_and_async(e2e_config: kiq.Config, start_worker: StartWorker) -> None:
    jid = Price.perform_async(4)
    assert jid is not None
    worker = start_worker("-r", "tests.jobs.results", env={**FAST, "KIQ_PLUGINS": "results"})
    expected = {"number": 4, "price": 6.0, "tags": ["a", "b"]}
    assert results.result(jid, wait=30) == expected, worker.output()
    assert 0 < e2e_config.redis.pttl(shared(e2e_config, f"kiq:result:{jid}")) <= 60_000
    assert run_async(e2e_config, lambda: results.aio.result(jid)) == expected


def test_a_job_past_its_deadline_is_dropped_and_counted(e2e_config: kiq.Config, start_worker: StartWorker) -> None:
    e2e_config.add_plugin("expiry")
    late = expiry_jobs.Quote.set(expires_at=time.time() - 1).perform_async(1)
    fresh = expiry_jobs.Quote.perform_async(2)
    worker = start_worker("-r", "tests.jobs.expiry", "-c", "1", env={**FAST, "KIQ_PLUGINS": "expiry"})
    wait_until(lambda: expired_counts() == {"ExpiryQuote": 1}, 30, message=f"the late job dropped\n{worker.output()}")
    wait_until(lambda: e2e_config.redis.lrange(expiry_jobs.RUNS, 0, -1) == [fresh], 30, message="the fresh job run")
    assert late not in e2e_config.redis.lrange(expiry_jobs.RUNS, 0, -1)
    assert e2e_config.redis.hgetall(shared(e2e_config, "kiq:expiry:expired")) == {"ExpiryQuote": "1"}


# -- metrics ----------------------------------------------------------------------------------------------------------
def test_the_metrics_port_reads_the_queues_and_sets_of_the_cluster(
    e2e_config: kiq.Config, start_worker: StartWorker
) -> None:
    client = kiq.Client(e2e_config)
    for queue, count in (("alpha", 3), ("beta", 2), ("gamma", 1)):  # in the queue layout, in slots of their own
        client.push_bulk({"class": "Elsewhere", "queue": queue, "args": [[n] for n in range(count)]})
    client.push({"class": "Elsewhere", "args": [], "at": time.time() + 3600})
    e2e_config.redis.hincrby(shared(e2e_config, "kiq:limiter:overrated"), "bucket:api", 4)  # a plugin's fleet reading
    port = free_port()
    args = ("-r", "tests.jobs.operations", "-q", "unused", "--metrics-port", str(port))
    worker = start_worker(*args, env={**FAST, "KIQ_PLUGINS": "metrics,limiter"})
    wait_until(lambda: get(port, "/livez", timeout=2)[0] == 200, 30, message=f"the metrics port\n{worker.output()}")
    samples = scrape(port)
    assert value(samples, "kiq_up") == 1
    # no known queue of this worker (neither served nor named by a registered class): read, summed as "other"
    assert value(samples, "kiq_queue_size", queue="other") == 3 + 2 + 1
    assert 0 < value(samples, "kiq_queue_latency_seconds", queue="other") < 600
    assert value(samples, "kiq_scheduled_set_size") == 1 and value(samples, "kiq_retry_set_size") == 0
    assert value(samples, "kiq_limiter_reschedules_total", limiter="bucket:api") == 4
    assert get(port, "/readyz")[0] == 200  # the cluster answers its PING


# -- tracking ---------------------------------------------------------------------------------------------------------
def test_a_tracked_task_runs_and_converges_on_the_cluster(
    e2e_config: kiq.Config, start_worker: StartWorker, tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'tracking.db'}"
    tracker = track(e2e_config, database)  # it keeps nothing in Redis: its pushes go through the keyspace
    try:
        task_id = tracker.create_task(tracking_jobs.SlowEnroll, [[n, "fail" if n == 3 else "ok"] for n in range(6)])
        env = {**FAST, "KIQ_PLUGINS": "tracking", "KIQ_TRACKING_DATABASE_URL": database}
        worker = start_worker("-r", "tests.jobs.tracking", env=env)

        def task() -> dict[str, Any]:
            found = tracker.task(task_id, with_events=False)
            assert found is not None
            return found

        wait_until(lambda: task()["complete"], 30, message=f"the task to complete\n{worker.output()}")
        assert task()["counts"] == {"enqueued": 0, "working": 0, "finished": 5, "failed": 1, "error": 0}
        assert e2e_config.redis.llen(tracking_jobs.DONE) == 6
    finally:
        tracker.writer.close(5)
        tracker.store.engine.dispose()


# -- ActiveJob and OTel -----------------------------------------------------------------------------------------------
def test_an_activejob_push_lands_in_the_queues_list(config: kiq.Config) -> None:
    jid = activejob.perform_later("ReportJob", 7, queue="reports")
    async_jid = run_async(config, lambda: activejob.job("ReportJob").aio.perform_later(8))
    keys = kiq.ext.keyspace(config.redis)
    (report,) = [json.loads(raw) for raw in config.redis.lrange(keys.queue("reports"), 0, -1)]
    (default,) = [json.loads(raw) for raw in config.redis.lrange(keys.queue("default"), 0, -1)]
    assert (report["jid"], report["wrapped"], report["args"][0]["arguments"]) == (jid, "ReportJob", [7])
    assert (default["jid"], default["args"][0]["arguments"]) == (async_jid, [8])
    assert config.redis.smembers(keys.key("queues")) == {"reports", "default"}


def test_the_otel_plugin_traces_a_push_to_the_cluster(config: kiq.Config) -> None:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    otel.instrument(config, tracer_provider=tracer_provider, meter_provider=MeterProvider([InMemoryMetricReader()]))
    jid = kiq.Client(config).push({"class": "Traced", "args": [1]})
    (span,) = spans.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["messaging.message.id"] == jid
    nodes = {(node.host, node.port) for node in config.redis.get_nodes()}  # type: ignore[attr-defined]
    assert (span.attributes["server.address"], span.attributes["server.port"]) in nodes
    assert config.redis.llen(kiq.ext.keyspace(config.redis).queue("default")) == 1
