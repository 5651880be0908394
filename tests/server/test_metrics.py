"""Job metrics written by a worker (kiq.server.metrics): Sidekiq 7's and 8's keys and BITFIELD layout (what Sidekiq
8's query reads is replayed in tests/server/test_metrics_sidekiq8.py), every job counted
exactly once through heartbeats, the last flush at shutdown, concurrent runner threads and writes Redis refused;
nothing at all with ``metrics = false``."""

from __future__ import annotations

import datetime
import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.api import Metrics
from kiq.keys import HISTOGRAM_BOUNDS_MS, METRICS_ROLLUP_TTL, METRICS_TTL
from kiq.server.launcher import Launcher
from kiq.server.metrics import MAX_CLASSES, MetricsFlusher, Recorder
from tests.support import short_block, wait_until

BUCKETS = len(HISTOGRAM_BOUNDS_MS)
OURS = "tests.metrics."  # the prefix of this module's class names
# SCAN patterns of each family's count hashes (a glob's ``?`` is one character)
SIDEKIQ7_HASHES = "j|????????|*"  # j|YYYYMMDD|H:M
SIDEKIQ8_MINUTES = "j|??????|*:??"  # j|YYMMDD|H:MM
SIDEKIQ8_ROLLUPS = "j|??????|*:?"  # j|YYMMDD|H:M, M the tens of minutes


class Quick(kiq.Job):
    kiq_name = "tests.metrics.Quick"

    def perform(self) -> None:
        pass


class Boom(kiq.Job):
    kiq_name = "tests.metrics.Boom"
    kiq_options = {"retry": False}

    def perform(self) -> None:
        raise ValueError("boom")


class Declined(kiq.Job):
    """Returns normally but reports a business failure (what the tracking plugin does)."""

    kiq_name = "tests.metrics.Declined"

    def perform(self) -> None:
        kiq.ext.report_failure("declined")


class AsyncQuick(kiq.Job):
    kiq_name = "tests.metrics.AsyncQuick"

    async def perform(self) -> None:
        pass


class Crawl(kiq.Job):
    """Runs (in short sleeps, so a hard shutdown can interrupt it) until the test pushes to ``release``."""

    kiq_name = "tests.metrics.Crawl"

    def perform(self) -> None:
        redis = kiq.default_config().redis
        redis.rpush("crawling", self.jid)
        while not redis.exists("release"):
            time.sleep(0.02)


# -- reading back what was written, key by key (SCAN is fine in a test) ---------------------------------------
def counts(r: redis.Redis, family: str = SIDEKIQ7_HASHES) -> dict[str, int]:
    """The fields of this module's classes (``tests.metrics.*``) in every count hash of a family (Sidekiq 7's
    minutes by default), summed (other test sessions may share the server and write their own classes' metrics
    meanwhile)."""
    total: Counter[str] = Counter()
    for key in r.scan_iter(family):
        total.update({field: int(value) for field, value in r.hgetall(key).items() if field.startswith(OURS)})
    return dict(total)


def histogram(r: redis.Redis, name: str, prefix: str = "") -> list[int]:
    """One class's histogram, summed over its minute keys: Sidekiq 7's, or with ``prefix="h|"`` Sidekiq 8's."""
    total = [0] * BUCKETS
    for key in r.scan_iter(f"{prefix}{name}-*"):
        for index, count in enumerate(read_buckets(r, key)):
            total[index] += count
    return total


def read_buckets(r: redis.Redis, key: str) -> list[int]:
    """The 26 u16 counters, decoded from the raw string (big-endian, bucket i at byte 2i), not with BITFIELD."""
    raw = (r.execute_command("GET", key, NEVER_DECODE=True) or b"").ljust(2 * BUCKETS, b"\0")
    assert len(raw) == 2 * BUCKETS, raw
    return [int.from_bytes(raw[2 * index : 2 * index + 2], "big") for index in range(BUCKETS)]


def metric_keys(r: redis.Redis) -> list[str]:
    """The histograms of this module's classes, and the count hashes that hold any of their fields."""
    hashes = [key for key in r.scan_iter("j|*") if any(field.startswith(OURS) for field in r.hkeys(key))]
    return hashes + list(r.scan_iter(f"{OURS}*")) + list(r.scan_iter(f"h|{OURS}*"))


@pytest.fixture
def launch(config: kiq.Config) -> Iterator[Callable[[], Launcher]]:
    config.heartbeat_interval = 0.1
    config.timeout = 2
    launchers: list[Launcher] = []

    def start() -> Launcher:
        launcher = Launcher(config)
        for manager in launcher.managers:
            short_block(manager.fetcher)
        launchers.append(launcher)
        launcher.run()
        return launcher

    yield start
    config.redis.set("release", 1)
    for launcher in launchers:
        launcher.stop()


def processed(launcher: Launcher) -> int:
    return launcher.heartbeat.totals()[0]


# -- a real worker ---------------------------------------------------------------------------------------------
def test_a_worker_counts_every_class_in_sidekiqs_keys(
    launch: Callable[[], Launcher], config: kiq.Config, r: redis.Redis
) -> None:
    Quick.perform_bulk([[]] * 40)
    Boom.perform_bulk([[]] * 7)
    Declined.perform_bulk([[]] * 3)
    AsyncQuick.perform_bulk([[]] * 5)
    # an ActiveJob-style wrapper: shown under the class it wraps
    kiq.Client(config).push({"class": Quick.kiq_name, "args": [], "wrapped": "tests.metrics.Shop::Mailer"})
    launcher = launch()
    expected = {
        "tests.metrics.Quick|p": 40,
        "tests.metrics.Boom|p": 7,
        "tests.metrics.Boom|f": 7,
        "tests.metrics.Declined|p": 3,
        "tests.metrics.Declined|f": 3,
        "tests.metrics.AsyncQuick|p": 5,
        "tests.metrics.Shop::Mailer|p": 1,
    }

    def without_ms() -> dict[str, int]:
        return {field: value for field, value in counts(r).items() if not field.endswith("|ms")}

    # written by the heartbeat while the worker runs, not only by the stop
    wait_until(lambda: without_ms() == expected, 20, message=f"the metrics of 56 jobs (have {without_ms()})")
    assert processed(launcher) == 56
    launcher.stop()
    written = counts(r)
    assert {field: value for field, value in written.items() if not field.endswith("|ms")} == expected  # not twice
    # time is counted for the classes that succeeded only, as Sidekiq does
    assert {field for field in written if field.endswith("|ms")} == {
        "tests.metrics.Quick|ms",
        "tests.metrics.AsyncQuick|ms",
        "tests.metrics.Shop::Mailer|ms",
    }
    assert sum(histogram(r, "tests.metrics.Quick")) == 40
    assert sum(histogram(r, "tests.metrics.AsyncQuick")) == 5
    assert sum(histogram(r, "tests.metrics.Shop::Mailer")) == 1
    assert histogram(r, "tests.metrics.Boom") == [0] * BUCKETS and histogram(r, "tests.metrics.Declined") == [0] * 26
    # Sidekiq 8's minute and 10-minute hashes and its histograms hold the same (sidekiq_wire = 7 writes both)
    assert counts(r, SIDEKIQ8_MINUTES) == counts(r, SIDEKIQ8_ROLLUPS) == written
    for name in ("Quick", "AsyncQuick", "Shop::Mailer", "Boom"):
        assert histogram(r, f"{OURS}{name}", prefix="h|") == histogram(r, f"{OURS}{name}"), name
    rollups = set(r.scan_iter(SIDEKIQ8_ROLLUPS))
    for key in metric_keys(r):
        ttl = METRICS_ROLLUP_TTL if key in rollups else METRICS_TTL
        assert ttl - 60 < r.ttl(key) <= ttl, key
    # and the reader agrees with the keys
    report = Metrics(config).top_jobs(minutes=5)
    quick = report.job("tests.metrics.Quick")
    assert quick is not None and (quick.processed, quick.failed, sum(quick.histogram)) == (40, 0, 40)
    boom = report.job("tests.metrics.Boom")
    assert boom is not None and (boom.processed, boom.failed, boom.total_ms, boom.p50_ms) == (7, 7, 0, None)


def test_a_job_requeued_by_a_hard_shutdown_is_not_counted(
    launch: Callable[[], Launcher], config: kiq.Config, r: redis.Redis
) -> None:
    config.timeout = 0.3
    Crawl.perform_async()
    launcher = launch()
    wait_until(lambda: r.llen("crawling") == 1, 20, message="the job to run")
    Quick.perform_async()
    wait_until(lambda: processed(launcher) == 1, 20, message="the quick job")
    launcher.stop()  # Crawl still runs at the deadline: requeued
    assert r.llen("queue:default") == 1
    written = counts(r)
    assert set(written) == {"tests.metrics.Quick|p", "tests.metrics.Quick|ms"} and written["tests.metrics.Quick|p"] == 1
    assert r.get("stat:processed") == "1"


def test_the_stop_writes_what_finished_after_the_last_heartbeat(
    launch: Callable[[], Launcher], config: kiq.Config, r: redis.Redis
) -> None:
    config.heartbeat_interval = 60  # the beats: one at the start, one when the stop quiets the worker
    Crawl.perform_async()
    launcher = launch()
    wait_until(lambda: r.llen("crawling") == 1, 20, message="the job to run")
    stopping = threading.Thread(target=launcher.stop)
    stopping.start()
    wait_until(lambda: r.hget(launcher.identity, "quiet") == "true", 20, message="the quiet's heartbeat")
    assert counts(r) == {}
    r.set("release", 1)  # the job ends while the stop waits for it
    stopping.join(20)
    written = counts(r)
    assert written["tests.metrics.Crawl|p"] == 1 and written["tests.metrics.Crawl|ms"] > 0
    assert sum(histogram(r, "tests.metrics.Crawl")) == 1


def test_metrics_false_records_and_writes_nothing(
    launch: Callable[[], Launcher], config: kiq.Config, r: redis.Redis
) -> None:
    config.metrics = False
    Quick.perform_bulk([[]] * 5)
    Boom.perform_async()
    launcher = launch()
    wait_until(lambda: r.get("stat:processed") == "6", 20, message="six jobs counted in the stats")
    launcher.stop()
    assert metric_keys(r) == []
    assert launcher.heartbeat.metrics is None and all(runner.metrics is None for runner in launcher.managers[0].runners)


def test_the_setting_reads_from_the_environment() -> None:
    assert kiq.Config.load(env={"KIQ_METRICS": "off"}).metrics is False
    assert kiq.Config.load(env={}).metrics is True
    with pytest.raises(kiq.ConfigError, match="metrics"):
        kiq.Config(metrics="sometimes")


# -- Redis refusing writes -------------------------------------------------------------------------------------
@pytest.fixture
def at_maxmemory(r: redis.Redis, request: pytest.FixtureRequest) -> Iterator[Callable[[bool], None]]:
    """``full(True)``: Redis refuses every write that needs memory (noeviction, 1 byte); ``full(False)`` undoes
    it (so does the teardown). Only on a server of the test's own: a shared one would refuse everyone's writes."""
    assert request.node.get_closest_marker("own_redis"), "mark the test @pytest.mark.own_redis"
    previous = r.config_get("maxmemory-policy")["maxmemory-policy"]

    def full(on: bool) -> None:
        if on:
            r.config_set("maxmemory-policy", "noeviction")
            r.config_set("maxmemory", 1)
        else:
            r.config_set("maxmemory", 0)
            r.config_set("maxmemory-policy", previous)

    yield full
    full(False)


@pytest.mark.own_redis
def test_a_flush_redis_refuses_keeps_the_counts_for_the_next(
    config: kiq.Config, r: redis.Redis, at_maxmemory: Callable[[bool], None]
) -> None:
    recorder = Recorder()
    job = {"class": "tests.metrics.A"}
    for _ in range(3):
        recorder.succeeded(job, time.perf_counter())
    recorder.failed(job)
    flusher = MetricsFlusher(config)
    at_maxmemory(True)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        flusher.flush([recorder])
    recorder.succeeded(job, time.perf_counter())  # more work while Redis refused
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        flusher.flush([recorder])
    assert metric_keys(r) == [] and counts(r) == {}
    at_maxmemory(False)
    assert flusher.flush([recorder]) == 1
    written = counts(r)
    assert (written["tests.metrics.A|p"], written["tests.metrics.A|f"], sum(histogram(r, "tests.metrics.A"))) == (
        5,
        1,
        4,
    )
    assert flusher.flush([recorder]) == 0  # nothing new: nothing written again
    assert counts(r) == written


@pytest.mark.own_redis
def test_a_heartbeat_at_maxmemory_logs_the_outage_and_writes_the_metrics_later(
    launch: Callable[[], Launcher],
    r: redis.Redis,
    at_maxmemory: Callable[[bool], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    Quick.perform_bulk([[]] * 20)
    Boom.perform_bulk([[]] * 2)
    at_maxmemory(True)
    with caplog.at_level(logging.WARNING, logger="kiq"):
        launcher = launch()
        wait_until(lambda: processed(launcher) == 22, 20, message="22 jobs (fetching works at maxmemory)")
        wait_until(lambda: launcher.outage.down_since is not None, 20, message="a heartbeat refused")
        time.sleep(0.3)  # a few more refused heartbeats
        assert counts(r) == {}
        at_maxmemory(False)
        wait_until(lambda: counts(r).get("tests.metrics.Quick|p") == 20, 20, message="the metrics after the outage")
    launcher.stop()
    written = counts(r)
    assert (written["tests.metrics.Quick|p"], written["tests.metrics.Boom|f"], written["tests.metrics.Boom|p"]) == (
        20,
        2,
        2,
    )
    assert sum(histogram(r, "tests.metrics.Quick")) == 20
    assert any("is out of memory" in record.getMessage() for record in caplog.records), caplog.text


def test_a_server_that_refuses_only_the_metrics_keeps_the_process_registered(
    config: kiq.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """An ACL without BITFIELD: the registry and the stats are written, the metrics wait (and are logged once)."""
    user = f"kiq-test-no-bitfield-{secrets.token_hex(4)}"  # ACL users are server-wide
    r.acl_setuser(user, enabled=True, passwords=["+secret"], categories=["+@all"], commands=["-bitfield"], keys=["*"])
    scheme, _, rest = str(config.redis_url).partition("://")
    worker_config = kiq.Config(redis_url=f"{scheme}://{user}:secret@{rest}", heartbeat_interval=0.1, timeout=2)
    Quick.perform_bulk([[]] * 5)
    launcher = Launcher(worker_config)
    for manager in launcher.managers:
        short_block(manager.fetcher)
    try:
        with caplog.at_level(logging.INFO, logger="kiq"):
            launcher.run()
            wait_until(lambda: r.get("stat:processed") == "5", 20, message="the stats of five jobs")
            wait_until(lambda: launcher.outage.down_since is not None, 20, message="the metrics refused")
            beat = r.hget(launcher.identity, "beat")
            wait_until(lambda: r.hget(launcher.identity, "beat") != beat, 20, message="the registry written on")
            assert counts(r) == {}
            r.acl_setuser(user, enabled=True, commands=["+bitfield"])  # enabled: redis-py's default is "off"
            wait_until(lambda: counts(r).get(f"{OURS}Quick|p") == 5, 20, message="the metrics once allowed")
            # an end within a second of the start is logged only at that second's end (kiq.server.outcomes.LEFTOVER)
            wait_until(lambda: "Redis works again" in caplog.text, 5, message="the end of the outage logged")
        launcher.stop()
    finally:
        launcher.stop()
        worker_config.redis.close()
        r.acl_deluser(user)
    assert counts(r)[f"{OURS}Quick|p"] == 5 and sum(histogram(r, f"{OURS}Quick")) == 5
    logged = [record.getMessage() for record in caplog.records if "heartbeat metrics" in record.getMessage()]
    assert len(logged) == 2 and "no permissions" in logged[0], logged  # once refused, once again written
    # the end names every work that failed meanwhile: on a loaded machine a heartbeat or a poll may time out too
    assert logged[1].startswith("Redis works again (") and "heartbeat metrics" in logged[1].split(")")[0], logged


# -- the recorder and the flusher ------------------------------------------------------------------------------
def started_ago(ms: float) -> float:
    """A ``started`` clock reading ``ms`` milliseconds ago (plus half a millisecond, so truncation lands on ms)."""
    return time.perf_counter() - (ms + 0.5) / 1000


def test_the_key_names_and_the_bitfield_layout_are_sidekiqs(config: kiq.Config, r: redis.Redis) -> None:
    recorder = Recorder()
    times = [0, 19, 20, 44, 45, 280, 334_999, 335_000, 3_600_000]
    for ms in times:
        recorder.succeeded({"class": "HardJob"}, started_ago(ms))
    recorder.failed({"class": "HardJob"})
    recorder.succeeded({"class": "Wrapper", "wrapped": "Café|Mailer"}, started_ago(1))
    at = datetime.datetime(2024, 1, 5, 9, 7, 59, tzinfo=datetime.UTC).timestamp()
    assert MetricsFlusher(config).flush([recorder], now=at) == 2
    # Sidekiq 7: "j|%Y%m%d|%-H:%-M" for the hash, "<class>-%d-%H:%-M" for the histogram
    written = r.hgetall("j|20240105|9:7")
    # the time: each job's exact one summed (in whole ms), not each one truncated (Sidekiq's clock in whole ms
    # is exact on average, too): the half ms of each of the nine jobs counts
    assert sum(times) + 4 <= int(written.pop("HardJob|ms")) <= sum(times) + 5
    assert written == {"HardJob|p": "10", "HardJob|f": "1", "Café|Mailer|p": "1", "Café|Mailer|ms": "1"}
    expected = [0] * BUCKETS
    for bucket in (0, 0, 1, 2, 3, 7, 24, 25, 25):  # the first bound greater than the time
        expected[bucket] += 1
    assert read_buckets(r, "HardJob-05-09:7") == expected
    assert r.execute_command("BITFIELD_RO", "HardJob-05-09:7", "GET", "u16", "#7") == [1]
    assert read_buckets(r, "Café|Mailer-05-09:7")[0] == 1
    assert list(r.scan_iter("HardJob*")) == ["HardJob-05-09:7"]
    for key in ("j|20240105|9:7", "HardJob-05-09:7", "Café|Mailer-05-09:7"):
        assert METRICS_TTL - 60 < r.ttl(key) <= METRICS_TTL


def test_a_histogram_counter_saturates_at_65535(config: kiq.Config, r: redis.Redis) -> None:
    recorder = Recorder()
    flusher = MetricsFlusher(config)
    at = datetime.datetime(2024, 1, 5, 23, 59, tzinfo=datetime.UTC).timestamp()
    recorder.counts["Flood"] = [0, 0.0, 70_000] + [0] * (BUCKETS - 1)  # 70,000 jobs of under 20 ms
    flusher.flush([recorder], now=at)
    flusher.flush([recorder], now=at)  # nothing new
    recorder.counts["Flood"][2] += 10
    flusher.flush([recorder], now=at)
    assert r.hget("j|20240105|23:59", "Flood|p") == "70010"
    assert read_buckets(r, "Flood-05-23:59")[0] == 65535


def test_runner_threads_and_a_flushing_thread_lose_and_double_no_count(config: kiq.Config, r: redis.Redis) -> None:
    recorders = [Recorder() for _ in range(4)]
    flusher = MetricsFlusher(config)
    at = time.time()
    done = threading.Event()
    flushes = 0
    jobs = [{"class": f"{OURS}Even"}, {"class": f"{OURS}Odd"}, {"class": f"{OURS}Other", "wrapped": f"{OURS}Wrapped"}]

    def run(recorder: Recorder) -> None:
        for index in range(30_000):
            job = jobs[index % 3]
            if index % 7 == 0:
                recorder.failed(job)
            else:
                recorder.succeeded(job, time.perf_counter())

    def flush() -> None:
        nonlocal flushes
        while not done.is_set():
            flusher.flush(recorders, now=at)
            flushes += 1

    flushing = threading.Thread(target=flush)
    flushing.start()
    runners = [threading.Thread(target=run, args=(recorder,)) for recorder in recorders]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join()
    done.set()
    flushing.join()
    flusher.flush(recorders, now=at)
    assert flushes > 3  # the flushes did overlap the recording
    written = counts(r)
    failures = len([index for index in range(30_000) if index % 7 == 0 and index % 3 == 0])
    assert written[f"{OURS}Even|p"] == 4 * 10_000 and written[f"{OURS}Even|f"] == 4 * failures
    for name in (f"{OURS}Even", f"{OURS}Odd", f"{OURS}Wrapped"):
        # what the recorders hold: [failed, seconds, histogram...], summed over the threads
        recorded: list[Any] = [sum(values) for values in zip(*(rec.counts[name] for rec in recorders), strict=True)]
        ms = sum(int(recorder.counts[name][1] * 1000) for recorder in recorders)  # each recorder's total, in ms
        processed = recorded[0] + sum(recorded[2:])
        assert [written.get(f"{name}|p", 0), written.get(f"{name}|f", 0), written[f"{name}|ms"]] == [
            processed,
            recorded[0],
            ms,
        ]
        assert histogram(r, name) == recorded[2:]
        assert processed == 40_000


def test_a_write_that_fails_inside_the_transaction_is_logged_not_repeated(
    config: kiq.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Once MULTI/EXEC ran, the other writes are in: writing all again would count them twice."""
    at = datetime.datetime(2024, 1, 5, 9, 7, tzinfo=datetime.UTC).timestamp()
    r.set("j|20240105|9:7", "not a hash")
    recorder = Recorder()
    recorder.succeeded({"class": "A"}, started_ago(25))
    flusher = MetricsFlusher(config)
    with caplog.at_level(logging.WARNING, logger="kiq"):
        assert flusher.flush([recorder], now=at) == 1
    assert "job metrics: 2 writes failed" in caplog.text and "WRONGTYPE" in caplog.text
    assert read_buckets(r, "A-05-09:7")[1] == 1
    assert flusher.flush([recorder], now=at) == 0
    assert read_buckets(r, "A-05-09:7")[1] == 1


def test_a_runner_counts_a_bounded_number_of_classes() -> None:
    recorder = Recorder()
    for index in range(MAX_CLASSES + 5):
        recorder.failed({"class": f"Junk{index}"})
    recorder.failed({"class": "Junk0"})
    assert len(recorder.counts) == MAX_CLASSES and f"Junk{MAX_CLASSES}" not in recorder.counts
    assert recorder.counts["Junk0"][0] == 2
