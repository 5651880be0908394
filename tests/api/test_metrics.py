"""``kiq.api.Metrics`` reading job metrics as Ruby Sidekiq 7 writes them (lib/sidekiq/metrics/tracking.rb and
shared.rb): the keys here are written by hand in that format, not with kiq's writer, so a format mistake on
either side shows."""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Iterator

import pytest
import redis

import kiq
from kiq.api import HISTOGRAM_BOUNDS_MS, HISTOGRAM_LABELS, JobClassMetrics, Metrics

UTC = datetime.UTC
NOW = datetime.datetime(2024, 3, 10, 14, 30, 20, tzinfo=UTC)


def minute(hour: int, minute: int, day: int = 10, month: int = 3) -> datetime.datetime:
    return datetime.datetime(2024, month, day, hour, minute, tzinfo=UTC)


def sidekiq_flush(
    r: redis.Redis,
    at: datetime.datetime,
    name: str,
    processed: int = 0,
    failed: int = 0,
    ms: int | None = None,
    buckets: dict[int, int] | None = None,
) -> None:
    """What ExecutionTracker#flush writes for one class: HINCRBY into ``j|%Y%m%d|%-H:%-M``, and the histogram
    ``<class>-%d-%H:%-M`` by BITFIELD OVERFLOW SAT INCRBY u16 #i."""
    stats = f"j|{at:%Y%m%d}|{at.hour}:{at.minute}"
    if ms is not None:
        r.hincrby(stats, f"{name}|ms", ms)
    if processed:
        r.hincrby(stats, f"{name}|p", processed)
    if failed:
        r.hincrby(stats, f"{name}|f", failed)
    r.expire(stats, 8 * 60 * 60)
    if buckets:
        key = f"{name}-{at:%d}-{at:%H}:{at.minute}"
        increments = [word for index, count in buckets.items() for word in ("INCRBY", "u16", f"#{index}", count)]
        r.execute_command("BITFIELD", key, "OVERFLOW", "SAT", *increments)


def histogram(buckets: dict[int, int]) -> list[int]:
    counts = [0] * len(HISTOGRAM_BOUNDS_MS)
    for index, count in buckets.items():
        counts[index] = count
    return counts


def test_the_buckets_are_sidekiqs() -> None:
    assert len(HISTOGRAM_BOUNDS_MS) == len(HISTOGRAM_LABELS) == 26
    assert HISTOGRAM_BOUNDS_MS[:5] == (20, 30, 45, 65, 100) and HISTOGRAM_BOUNDS_MS[-2] == 335_000
    assert HISTOGRAM_BOUNDS_MS[-1] == math.inf and HISTOGRAM_LABELS[-1] == "Slow" and HISTOGRAM_LABELS[10] == "1.1s"
    assert list(HISTOGRAM_BOUNDS_MS) == sorted(HISTOGRAM_BOUNDS_MS)


def test_top_jobs_sums_the_window_and_puts_the_most_time_first(config: kiq.Config, r: redis.Redis) -> None:
    sidekiq_flush(r, minute(14, 30), "HardJob", processed=6, failed=2, ms=500, buckets={3: 3, 5: 1})
    sidekiq_flush(r, minute(14, 5), "HardJob", processed=4, ms=300, buckets={3: 4})
    sidekiq_flush(r, minute(13, 31), "EasyJob", processed=100, ms=200, buckets={0: 100})  # the window's first minute
    sidekiq_flush(r, minute(14, 0), "BrokenJob", processed=5, failed=5)
    sidekiq_flush(r, minute(13, 30), "HardJob", processed=1000, ms=10**6, buckets={9: 1000})  # before the window
    sidekiq_flush(r, minute(14, 31), "HardJob", processed=1000, ms=10**6, buckets={9: 1000})  # after it
    report = Metrics(config).top_jobs(minutes=60, now=NOW)
    assert (report.starts_at, report.ends_at) == (minute(13, 31), minute(14, 30))
    assert [job.name for job in report.jobs] == ["HardJob", "EasyJob", "BrokenJob"]
    hard, easy, broken = report.jobs
    assert hard == JobClassMetrics("HardJob", 10, 2, 800, histogram({3: 7, 5: 1}))
    assert hard.succeeded == 8 and hard.avg_ms == 100.0  # Sidekiq's average: ms / (processed - failed)
    assert (hard.p50_ms, hard.p95_ms) == (65.0, 150.0)
    assert easy == JobClassMetrics("EasyJob", 100, 0, 200, histogram({0: 100}))
    assert (easy.avg_ms, easy.p50_ms, easy.p95_ms) == (2.0, 20.0, 20.0)
    assert broken == JobClassMetrics("BrokenJob", 5, 5, 0, histogram({}))
    assert (broken.avg_ms, broken.p50_ms, broken.p95_ms) == (0.0, None, None)
    assert report.job("BrokenJob") is broken and report.job("Nope") is None
    assert Metrics(config).top_jobs(minutes=1, now=NOW).jobs == [
        JobClassMetrics("HardJob", 6, 2, 500, histogram({3: 3, 5: 1}))
    ]
    as_json = json.loads(json.dumps(report.as_dict()))
    assert as_json["jobs"][0]["name"] == "HardJob" and as_json["jobs"][0]["p95_ms"] == 150.0
    assert as_json["starts_at"] == "2024-03-10T13:31:00+00:00"


def test_percentiles_are_bucket_upper_bounds() -> None:
    # 100 timed jobs: 50 under 20 ms, 45 in 45-65 ms, 4 in 750-1100 ms, 1 slower than 335 s
    job = JobClassMetrics("J", 100, 0, 0, histogram({0: 50, 3: 45, 10: 4, 25: 1}))
    assert job.p50_ms == 20.0  # the 50th job is in the first bucket
    assert job.percentile_ms(0.51) == 65.0
    assert job.p95_ms == 65.0 and job.percentile_ms(0.96) == 1100.0 and job.p99_ms == 1100.0
    assert job.percentile_ms(1.0) == math.inf  # Sidekiq's "Slow" bucket
    assert job.as_dict()["slow"] is False
    slow = JobClassMetrics("S", 1, 0, 400_000, histogram({25: 1}))
    assert slow.p50_ms == math.inf and slow.as_dict()["p50_ms"] is None and slow.as_dict()["slow"] is True
    assert JobClassMetrics("E", 0, 0, 0, histogram({})).p95_ms is None
    assert job.bucket_labels == list(HISTOGRAM_LABELS)
    for fraction in (0, -0.5, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            job.percentile_ms(fraction)


def test_a_window_across_midnight_reads_both_days(config: kiq.Config, r: redis.Redis) -> None:
    now = datetime.datetime(2024, 1, 6, 0, 1, 30, tzinfo=UTC)
    sidekiq_flush(r, datetime.datetime(2024, 1, 5, 23, 58, tzinfo=UTC), "NightJob", processed=3, ms=90, buckets={2: 3})
    sidekiq_flush(r, datetime.datetime(2024, 1, 5, 23, 57, tzinfo=UTC), "NightJob", processed=50, ms=1, buckets={0: 50})
    sidekiq_flush(
        r, datetime.datetime(2024, 1, 6, 0, 0, tzinfo=UTC), "NightJob", processed=2, failed=1, ms=7, buckets={0: 1}
    )
    series = Metrics(config).for_job("NightJob", minutes=4, now=now)
    assert [m.label for m in series.minutes] == ["23:58", "23:59", "00:00", "00:01"]
    assert series.starts_at == datetime.datetime(2024, 1, 5, 23, 58, tzinfo=UTC)
    assert series.ends_at == datetime.datetime(2024, 1, 6, 0, 1, tzinfo=UTC)
    assert [(m.processed, m.failed, m.total_ms) for m in series.minutes] == [
        (3, 0, 90),
        (0, 0, 0),
        (2, 1, 7),
        (0, 0, 0),
    ]
    assert series.minutes[0].histogram == histogram({2: 3}) and series.minutes[2].histogram == histogram({0: 1})
    assert series.minutes[1].histogram == histogram({})
    assert series.totals == JobClassMetrics("NightJob", 5, 1, 97, histogram({0: 1, 2: 3}))
    report = Metrics(config).top_jobs(minutes=4, now=now.timestamp())  # epoch seconds work too
    assert report.jobs == [series.totals]
    assert Metrics(config).top_jobs(minutes=5, now=now).jobs[0].processed == 55


def test_the_window_crosses_an_hour(config: kiq.Config, r: redis.Redis) -> None:
    sidekiq_flush(r, minute(13, 59), "HourJob", processed=1, ms=10, buckets={0: 1})
    sidekiq_flush(r, minute(14, 0), "HourJob", processed=2, ms=40, buckets={1: 2})
    series = Metrics(config).for_job("HourJob", minutes=32, now=NOW)
    assert [m.label for m in series.minutes][:3] == ["13:59", "14:00", "14:01"] and len(series.minutes) == 32
    assert series.totals == JobClassMetrics("HourJob", 3, 0, 50, histogram({0: 1, 1: 2}))
    assert Metrics(config).for_job("HourJob", minutes=31, now=NOW).totals.processed == 2


@pytest.mark.parametrize("name", ["Billing|Invoice", "Café::Ünïcødé✓", "a|b|c|p", "Mailer-05-09:7"])
def test_class_names_with_bars_and_any_characters(config: kiq.Config, r: redis.Redis, name: str) -> None:
    sidekiq_flush(r, minute(14, 29), name, processed=4, failed=1, ms=33, buckets={0: 2, 1: 1})
    sidekiq_flush(r, minute(14, 29), "Other", processed=1, ms=1, buckets={0: 1})
    report = Metrics(config).top_jobs(minutes=5, now=NOW)
    assert report.job(name) == JobClassMetrics(name, 4, 1, 33, histogram({0: 2, 1: 1}))
    assert sorted(job.name for job in report.jobs) == sorted([name, "Other"])
    assert Metrics(config).for_job(name, minutes=5, now=NOW).totals == report.job(name)


def test_class_filter_keeps_names_containing_it_in_any_case(config: kiq.Config, r: redis.Redis) -> None:
    for name in ("Billing|Invoice", "InvoiceMailer", "Cleanup"):
        sidekiq_flush(r, minute(14, 30), name, processed=1, ms=1, buckets={0: 1})
    report = Metrics(config).top_jobs(class_filter="invoice", now=NOW)
    assert sorted(job.name for job in report.jobs) == ["Billing|Invoice", "InvoiceMailer"]


def test_fields_of_another_shape_are_skipped(config: kiq.Config, r: redis.Redis) -> None:
    sidekiq_flush(r, minute(14, 30), "Good", processed=2, ms=4, buckets={0: 2})
    r.hset("j|20240310|14:30", mapping={"nobar": 1, "|p": 3, "Good|s": 9, "Bad|p": "x"})
    report = Metrics(config).top_jobs(minutes=1, now=NOW)
    assert report.job("Good") == JobClassMetrics("Good", 2, 0, 4, histogram({0: 2}))
    assert [job.name for job in report.jobs] == ["Good"]


def test_an_empty_window(config: kiq.Config) -> None:
    assert Metrics(config).top_jobs(now=NOW).jobs == []
    series = Metrics(config).for_job("Nothing", minutes=3, now=NOW)
    assert series.totals == JobClassMetrics("Nothing", 0, 0, 0, histogram({}))
    assert [m.label for m in series.minutes] == ["14:28", "14:29", "14:30"]


@pytest.mark.parametrize("minutes", [0, -1, 481, True, 1.5])
def test_a_window_is_1_to_480_minutes(config: kiq.Config, minutes: int) -> None:
    with pytest.raises(ValueError, match="minutes must be"):
        Metrics(config).top_jobs(minutes=minutes, now=NOW)
    with pytest.raises(ValueError, match="minutes must be"):
        Metrics(config).for_job("J", minutes=minutes, now=NOW)


def test_now_must_be_aware(config: kiq.Config) -> None:
    with pytest.raises(ValueError, match="aware"):
        Metrics(config).top_jobs(now=datetime.datetime(2024, 1, 1))


@pytest.fixture
def private_config(embedded_redis_url: str) -> Iterator[kiq.Config]:
    """A config on the embedded server only: its command statistics are this session's alone."""
    config = kiq.Config(redis_url=embedded_redis_url)
    config.redis.flushdb()
    yield config
    config.redis.close()


def test_reading_pipelines_known_keys_and_never_scans(private_config: kiq.Config) -> None:
    r = private_config.redis
    for hour, at in ((13, 40), (14, 10), (14, 20)):
        sidekiq_flush(r, minute(hour, at), "A", processed=2, ms=2, buckets={0: 2})
    sidekiq_flush(r, minute(14, 20), "B", processed=1, failed=1)  # no success: no histogram to read
    r.config_resetstat()
    report = Metrics(private_config).top_jobs(minutes=60, now=NOW)
    assert [(job.name, job.processed) for job in report.jobs] == [("A", 6), ("B", 1)]
    stats = r.info("commandstats")
    assert "cmdstat_scan" not in stats and "cmdstat_keys" not in stats
    assert stats["cmdstat_hgetall"]["calls"] == 2 * 60  # Sidekiq 7's and 8's hash of each minute, in one pipeline
    assert stats["cmdstat_bitfield_ro"]["calls"] == 2 * 3  # only where a class succeeded, both families
    r.config_resetstat()
    Metrics(private_config).for_job("A", minutes=30, now=NOW)
    stats = r.info("commandstats")
    assert stats["cmdstat_hmget"]["calls"] == 2 * 30 and stats["cmdstat_bitfield_ro"]["calls"] == 2 * 30
    assert "cmdstat_scan" not in stats and "cmdstat_keys" not in stats
