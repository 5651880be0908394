"""The metric readings of plugins (the ``kiq_metrics`` hook: isolated per implementation), the shipped plugins'
(batch, limiter, periodic), and the fleet's gauges (kiq.api.fleet) in the plugin's exposition and in kiq web's
``/metrics`` for a scraper, on a real Redis."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import kiq
import kiq.ext
from kiq.api.fleet import FleetGauges
from kiq.contrib.http import Request
from kiq.contrib.web import Dashboard
from kiq.plugins import limiter
from kiq.plugins.batch import Batch, BatchPlugin
from kiq.plugins.limiter import LimiterPlugin
from kiq.plugins.limiter.waits import waits
from kiq.plugins.metrics.exposition import MetricsCollector, exposition, registry_of
from kiq.plugins.periodic import PeriodicPlugin
from kiq.plugins.periodic.entries import PeriodicJob
from kiq.plugins.periodic.scheduler import Scheduler
from tests.jobs.operations import Fine
from tests.plugins.metrics.support import Samples, parse, value


def fleet_scrape(config: kiq.Config) -> Samples:
    body, _ = exposition(registry_of(MetricsCollector(FleetGauges(config))), None)
    return parse(body.decode())


class Counts:
    @kiq.hookimpl
    def kiq_metrics(self, scope: str) -> list[kiq.ext.Reading]:
        return [kiq.ext.Reading("kiq_test_things_total", 3, (("scope", scope),), "counter", "things")]


class Raises:
    @kiq.hookimpl
    def kiq_metrics(self) -> list[kiq.ext.Reading]:
        raise RuntimeError("this plugin's metrics are broken")


class ReturnsJunk:
    @kiq.hookimpl
    def kiq_metrics(self) -> object:
        return {"kiq_junk": 1}


def test_a_plugin_that_raises_or_returns_junk_is_left_out_and_the_others_are_served(
    config: kiq.Config, caplog: pytest.LogCaptureFixture
) -> None:
    for plugin in (Counts, Raises, ReturnsJunk):
        config.add_plugin(plugin)
    with caplog.at_level(logging.WARNING, logger="kiq"):
        samples = fleet_scrape(config)
    assert value(samples, "kiq_test_things_total", scope="fleet") == 3
    assert not any(name.startswith("kiq_junk") for name, _ in samples)
    assert "this plugin's metrics are broken" in caplog.text
    assert "not a list of kiq.ext.Reading" in caplog.text
    assert value(samples, "kiq_up") == 1


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("jobs_total", 1), "must match kiq_"),
        (("kiq_jobs", 1, (), "counter"), "ends in _total"),
        (("kiq_jobs", 1, (("Queue", "x"),)), "label name 'Queue'"),
        (("kiq_jobs", 1, (), "histogram"), "neither 'counter' nor 'gauge'"),
    ],
)
def test_a_bad_reading_is_refused_with_the_rule_it_breaks(arguments: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        kiq.ext.Reading(*arguments)  # type: ignore[arg-type]


def test_the_dashboard_answers_a_scraper_with_the_fleet_and_a_browser_with_its_page(config: kiq.Config) -> None:
    config.queues = ["default", "reports"]  # a known queue: a label of its own
    Fine.set(queue="reports").perform_bulk([[] for _ in range(4)])
    config.redis.hset("vm:1:abc", mapping={"info": kiq.ext.dumps({"concurrency": 7}), "busy": 2})
    config.redis.sadd("processes", "vm:1:abc")
    dashboard = Dashboard(config)

    def get(accept: str) -> tuple[int, str, bytes]:
        answer = dashboard(Request("GET", "/metrics", "", {"accept": accept}, b""))
        return answer.status, answer.content_type, answer.body

    status, content_type, body = get("application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4")
    assert status == 200 and content_type.startswith("application/openmetrics-text")
    status, content_type, body = get("text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
    assert status == 200 and content_type.startswith("text/plain")
    samples = parse(body.decode())
    assert value(samples, "kiq_queue_size", queue="reports") == 4
    # the fleet from the registry (a worker's own port reports its own instead)
    assert (value(samples, "kiq_processes"), value(samples, "kiq_busy_threads"), value(samples, "kiq_concurrency")) == (
        1,
        2,
        7,
    )
    status, content_type, body = get("text/html,application/xhtml+xml,*/*;q=0.8")
    assert status == 200 and content_type.startswith("text/html") and b"<html" in body


def test_the_fleet_gauges_are_read_once_per_second_whatever_the_scrapes(config: kiq.Config) -> None:
    gauges = FleetGauges(config)
    Fine.perform_async()
    first = gauges.readings()
    Fine.perform_async()
    assert gauges.readings() is first  # within CACHE_SECONDS: the same reading
    time.sleep(1.05)
    sizes = [reading.value for reading in gauges.readings() if reading.name == "kiq_queue_size"]
    assert sizes == [2]


class Critical(kiq.Job):
    kiq_name = "ReadingsCritical"
    kiq_options = {"queue": "critical"}

    def perform(self) -> None:
        pass


def test_the_queue_label_is_bounded_to_known_queues_and_every_other_name_is_summed_as_other(
    config: kiq.Config,
) -> None:
    """Any producer can add names to the ``queues`` set (3,000 one-job queues gave 6,000 series): only the queues
    this config serves and those registered classes name get a label; the rest are one ``queue="other"``."""
    config.queues = ["default", "served"]
    r = config.redis
    r.sadd("queues", *(f"junk-{n}" for n in range(300)), "served", "critical", "\udcff\x00" + "x" * 1000)
    for n in range(300):
        r.lpush(f"queue:junk-{n}", kiq.ext.dumps({"class": "X", "enqueued_at": time.time() - n}))
    r.lpush("queue:served", "{}", "{}")
    Fine.perform_async()
    samples = fleet_scrape(config)
    labels = {dict(labels)["queue"] for name, labels in samples if name == "kiq_queue_size"}
    # default and served (served here), critical (a registered class names it), then other; no name of junk
    assert {"default", "served", "critical", "other"} <= labels, sorted(labels)[:10]
    assert not [label for label in labels if label.startswith("junk-") or "x" * 100 in label]
    assert value(samples, "kiq_queue_size", queue="other") == 300
    assert value(samples, "kiq_queue_size", queue="served") == 2
    assert value(samples, "kiq_queue_size", queue="default") == 1
    assert value(samples, "kiq_queue_latency_seconds", queue="other") >= 299  # the oldest of them


def test_batches_open_counts_the_batches_not_complete_yet(config: kiq.Config) -> None:
    plugin = config.add_plugin(BatchPlugin)
    try:
        for _ in range(3):
            with Batch("open"):
                Fine.perform_async()
        samples = fleet_scrape(config)
        assert value(samples, "kiq_batches") == 3
        assert value(samples, "kiq_batches_open") == 3
    finally:
        plugin.kiq_shutdown(config)


def test_limiter_waits_are_counted_per_process_and_reschedules_for_the_fleet(config: kiq.Config) -> None:
    plugin = config.add_plugin(LimiterPlugin)
    gate = limiter.concurrent("ops-test-gate", 1, lock_timeout=30, wait_timeout=10, config=config)
    labels = {"limiter": "concurrent:ops-test-gate"}

    def waits_so_far() -> float:
        return value(_process_samples(plugin.kiq_metrics(config, "process")), "kiq_limiter_waits_total", **labels)

    before = waits_so_far()
    with gate:  # no wait: not counted
        holder_released = threading.Event()
        waited = threading.Thread(target=lambda: (gate.__enter__(), holder_released.set()))
        waited.start()
        time.sleep(0.3)  # the other thread is waiting for the room this block holds
    waited.join(15)
    assert holder_released.is_set() and waits_so_far() == before + 1
    config.redis.hincrby("kiq:limiter:overrated", "concurrent:ops-test-gate", 4)
    assert value(fleet_scrape(config), "kiq_limiter_reschedules_total", **labels) == 4
    assert waits.counts["concurrent:ops-test-gate"][1] >= 0.2  # the seconds waited


def _process_samples(readings: list[kiq.ext.Reading]) -> Samples:
    return {(r.name, frozenset(r.labels)): r.value for r in readings}


def test_periodic_ticks_skipped_by_a_scheduler_that_fell_behind_are_counted(config: kiq.Config) -> None:
    plugin = config.add_plugin(PeriodicPlugin)
    every_second = PeriodicJob("* * * * * *", "OpsFine", name="each-second")
    plugin.scheduler = Scheduler(config, [(every_second, Fine)])
    start = float(int(time.time()))
    plugin.scheduler._count_missed(every_second, start + 1, start + 6)  # paused from start to start + 6
    readings = plugin.kiq_metrics("process")
    assert readings is not None
    assert _process_samples(readings) == {("kiq_periodic_ticks_missed_total", frozenset({("job", "each-second")})): 5}
