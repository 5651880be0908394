"""Job metrics against Sidekiq 8's (8.0-8.1.7) own code, which cannot run here (Ruby 3.2): its reader,
``Sidekiq::Metrics::Query`` (lib/sidekiq/metrics/query.rb), replayed key by key and field by field in
tests/sidekiq8_metrics.py, reads what kiq writes; and what its writer, ``ExecutionTracker#flush``
(lib/sidekiq/metrics/tracking.rb, with ``Histogram#persist`` in shared.rb), leaves in Redis is a golden fixture
read back with ``kiq.api.Metrics``.

Line numbers cite sidekiq/sidekiq at 1bb4aa06 (v8.1.7)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import redis

import kiq
from kiq.api import Metrics
from kiq.server.metrics import SIZE, MetricsFlusher, Recorder
from tests.sidekiq8_metrics import flush, for_job_histogram, histogram_key, query_keys, top_jobs

UTC = datetime.UTC
# tracking.rb:65-67 comments its own example: "250214|8:4" is the 10 minute bucket of Feb 14 2025, 08:43
NOW = datetime.datetime(2025, 2, 14, 8, 43, 27, tzinfo=UTC)
HOURS, MINUTES = 3600, 60


def test_the_replayed_query_reads_the_keys_sidekiq_8_names() -> None:
    # pinned by hand, so the replay itself cannot drift: tracking.rb:65-68's own examples
    assert query_keys(NOW, minutes=3) == ["j|250214|8:43", "j|250214|8:42", "j|250214|8:41"]
    assert query_keys(NOW, hours=1) == [
        "j|250214|8:4", "j|250214|8:3", "j|250214|8:2", "j|250214|8:1", "j|250214|8:0", "j|250214|7:5",
    ]  # fmt: skip
    early = datetime.datetime(2009, 3, 1, 0, 4, 59, tzinfo=UTC)  # a two-digit year, a month and a day crossed
    assert query_keys(early, minutes=6) == [
        "j|090301|0:04", "j|090301|0:03", "j|090301|0:02", "j|090301|0:01", "j|090301|0:00", "j|090228|23:59",
    ]  # fmt: skip
    assert query_keys(early, hours=1)[:2] == ["j|090301|0:0", "j|090228|23:5"]
    assert histogram_key("HardJob", early) == "h|HardJob-1-0:4" and histogram_key("A", NOW) == "h|A-14-8:43"
    assert len(query_keys(NOW, hours=72)) == 432 and len(query_keys(NOW, minutes=999)) == 480


# -- kiq's writes, read by the replayed query -----------------------------------------------------------------
def recorder_of(jobs: dict[str, tuple[int, float, dict[int, int]]]) -> Recorder:
    """A recorder holding, per class, (failures, seconds of the successes, {bucket: successes})."""
    recorder = Recorder()
    for name, (failed, seconds, buckets) in jobs.items():
        counts: list[float] = [failed, seconds] + [0] * (SIZE - 2)
        for bucket, count in buckets.items():
            counts[2 + bucket] = count
        recorder.counts[name] = counts
    return recorder


# HardJob: three successes of 10 ms (bucket 0, "20ms"), one of 280 ms (bucket 7, "335ms"), one failure
# Mailer: two successes of 20 ms (bucket 1, "30ms": tracking.rb counts ms < 20 in bucket 0, shared.rb:79-85)
JOBS = {"HardJob": (1, 0.310, {0: 3, 7: 1}), "Mailer": (0, 0.040, {1: 2})}
TOTALS = {"HardJob": {"p": 5, "f": 1, "ms": 310}, "Mailer": {"p": 2, "ms": 40}}


@pytest.mark.parametrize("wire", [7, 8])
def test_sidekiq_8s_query_reads_what_kiq_writes(config: kiq.Config, r: redis.Redis, wire: int) -> None:
    config.sidekiq_wire = wire
    assert MetricsFlusher(config).flush([recorder_of(JOBS)], now=NOW.timestamp()) == 2
    # the Metrics page's periods (web/application.rb:30-38): 1h..8h from minutes, 24h..72h from 10-minute hashes
    for period in ({"minutes": 60}, {"minutes": 480}, {"hours": 24}, {"hours": 72}):
        assert top_jobs(r, query_keys(NOW, **period)) == TOTALS, period
    # for_job's HMGET (query.rb:94) of the minute, and its histograms
    assert r.hmget("j|250214|8:43", ["HardJob|ms", "HardJob|p", "HardJob|f"]) == ["310", "5", "1"]
    assert for_job_histogram(r, "HardJob", NOW) == [3, 0, 0, 0, 0, 0, 0, 1] + [0] * 18
    assert for_job_histogram(r, "Mailer", NOW) == [0, 2] + [0] * 24
    # the TTLs of tracking.rb:54-55, 86-87 (MID_TERM 3 days, SHORT_TERM 8 hours) and shared.rb:63, 104
    for key, ttl in (("j|250214|8:4", 72 * HOURS), ("j|250214|8:43", 8 * HOURS), ("h|HardJob-14-8:43", 8 * HOURS)):
        assert ttl - MINUTES < r.ttl(key) <= ttl, key
    # the same layout as Sidekiq: u16 big-endian counters, BITFIELD grows the string to the last bucket written
    assert r.execute_command("GET", "h|HardJob-14-8:43", NEVER_DECODE=True) == bytes.fromhex(
        "0003" + "00" * 12 + "0001"
    )
    sidekiq7 = {"j|20250214|8:43", "HardJob-14-08:43", "Mailer-14-08:43"}  # Sidekiq 7's names of the same minute
    assert {key for key in sidekiq7 if r.exists(key)} == (sidekiq7 if wire == 7 else set())
    hashes = {"j|250214|8:4", "j|250214|8:43"} | ({"j|20250214|8:43"} if wire == 7 else set())
    assert set(r.scan_iter("j|*")) == hashes


def test_the_next_flush_adds_to_sidekiq_8s_ten_minutes(config: kiq.Config, r: redis.Redis) -> None:
    flusher, recorder = MetricsFlusher(config), recorder_of(JOBS)
    flusher.flush([recorder], now=NOW.timestamp())
    recorder.counts["Mailer"][2 + 1] += 1  # one more Mailer, three minutes later: same 10 minutes, another minute
    flusher.flush([recorder], now=NOW.timestamp() + 3 * MINUTES)
    assert r.hgetall("j|250214|8:4")["Mailer|p"] == "3" and r.hget("j|250214|8:46", "Mailer|p") == "1"
    assert top_jobs(r, query_keys(NOW + datetime.timedelta(minutes=3), hours=1))["Mailer"] == {"p": 3, "ms": 40}


# -- what Sidekiq 8 writes, read by kiq ------------------------------------------------------------------------
# ExecutionTracker#flush at NOW (tracking.rb:57-101): per class, HINCRBY into the 10-minute and the minute hash,
# EXPIRE 3 days / 8 hours; Histogram#persist (shared.rb:93-106): BITFIELD key OVERFLOW SAT INCRBY u16 #i n,
# EXPIRE 8 hours. Plus a 10-minute hash two days old (kept by MID_TERM, too old for the minute keys).
SIDEKIQ8_WROTE: dict[str, tuple[dict[str, int] | str, int]] = {
    "j|250214|8:4": ({"HardJob|ms": 310, "HardJob|p": 5, "HardJob|f": 1, "Mailer|ms": 40, "Mailer|p": 2}, 259200),
    "j|250214|8:43": ({"HardJob|ms": 310, "HardJob|p": 5, "HardJob|f": 1, "Mailer|ms": 40, "Mailer|p": 2}, 28800),
    "h|HardJob-14-8:43": ("0003" + "00" * 12 + "0001", 28800),  # hex of the string: u16 #0 = 3, u16 #7 = 1
    "h|Mailer-14-8:43": ("00000002", 28800),  # u16 #1 = 2
    "j|250212|9:1": ({"HardJob|ms": 70, "HardJob|p": 7}, 259200),  # Feb 12, 09:10-09:19
}


def load(r: redis.Redis, keys: dict[str, tuple[dict[str, int] | str, int]]) -> None:
    for key, (value, ttl) in keys.items():
        if isinstance(value, dict):
            r.hset(key, mapping=value)  # type: ignore[arg-type]
        else:
            r.set(key, bytes.fromhex(value))
        r.expire(key, ttl)


def test_the_fixture_is_what_the_replayed_flush_writes(config: kiq.Config, r: redis.Redis) -> None:
    flush(r, NOW, "HardJob", 5, failed=1, ms=310, buckets={0: 3, 7: 1})
    flush(r, NOW, "Mailer", 2, ms=40, buckets={1: 2})
    flush(r, datetime.datetime(2025, 2, 12, 9, 14, 5, tzinfo=UTC), "HardJob", 7, ms=70, buckets={0: 7})
    for key, (value, ttl) in SIDEKIQ8_WROTE.items():
        if isinstance(value, dict):
            assert r.hgetall(key) == {field: str(count) for field, count in value.items()}, key
        else:
            assert r.execute_command("GET", key, NEVER_DECODE=True).hex() == value, key
        assert ttl - MINUTES < r.ttl(key) <= ttl, key


def totals(report: Any) -> dict[str, tuple[int, int, int]]:
    return {job.name: (job.processed, job.failed, job.total_ms) for job in report.jobs}


def test_kiq_reads_what_sidekiq_8_writes(config: kiq.Config, r: redis.Redis) -> None:
    load(r, SIDEKIQ8_WROTE)
    metrics = Metrics(config)
    report = metrics.top_jobs(minutes=60, now=NOW)
    assert totals(report) == {"HardJob": (5, 1, 310), "Mailer": (2, 0, 40)}
    hard = report.job("HardJob")
    assert hard is not None and hard.histogram == [3, 0, 0, 0, 0, 0, 0, 1] + [0] * 18 and hard.p50_ms == 20
    assert report.step == 60 and report.ends_at == datetime.datetime(2025, 2, 14, 8, 43, tzinfo=UTC)
    # the 72-hour view: Sidekiq 8's 10-minute hashes, the one of two days ago too
    wide = metrics.top_jobs(hours=72, now=NOW)
    assert totals(wide) == {"HardJob": (12, 1, 380), "Mailer": (2, 0, 40)} and wide.step == 600
    assert wide.job("HardJob").p50_ms is None  # type: ignore[union-attr]  # histograms are per minute only
    assert wide.ends_at == datetime.datetime(2025, 2, 14, 8, 40, tzinfo=UTC)
    assert wide.starts_at == datetime.datetime(2025, 2, 11, 8, 50, tzinfo=UTC)  # 432 buckets, the current one too
    assert totals(metrics.top_jobs(hours=24, now=NOW)) == {"HardJob": (5, 1, 310), "Mailer": (2, 0, 40)}
    series = metrics.for_job("HardJob", hours=72, now=NOW)
    assert len(series.minutes) == 432 and series.step == 600
    assert [(m.label, m.processed) for m in series.minutes if m.processed] == [("09:10", 7), ("08:40", 5)]
    minutes = metrics.for_job("HardJob", minutes=5, now=NOW)
    assert [(m.label, m.processed, m.failed, m.total_ms) for m in minutes.minutes][-1] == ("08:43", 5, 1, 310)
    assert minutes.totals == hard


def test_a_minute_kiq_wrote_to_both_families_counts_once_beside_ruby_processes(
    config: kiq.Config, r: redis.Redis
) -> None:
    """kiq (sidekiq_wire = 7) writes each count to Sidekiq 7's and 8's keys; a Ruby Sidekiq 7 process adds to 7's,
    a Sidekiq 8 one to 8's: the reader takes the larger of each field, so nothing is counted twice."""
    MetricsFlusher(config).flush([recorder_of(JOBS)], now=NOW.timestamp())
    r.hincrby("j|20250214|8:43", "Ruby7Job|p", 4)  # a Sidekiq 7 process, same minute
    r.hincrby("j|250214|8:43", "Mailer|p", 3)  # a Sidekiq 8 process ran Mailer too (3 failures)
    r.hincrby("j|250214|8:43", "Mailer|f", 3)
    report = Metrics(config).top_jobs(minutes=5, now=NOW)
    assert totals(report) == {"HardJob": (5, 1, 310), "Mailer": (5, 3, 40), "Ruby7Job": (4, 0, 0)}
    assert report.job("HardJob").histogram[:8] == [3, 0, 0, 0, 0, 0, 0, 1]  # type: ignore[union-attr]


@pytest.mark.parametrize(("window", "error"), [
    ({"minutes": 5, "hours": 1}, "minutes or hours, not both"),
    ({"hours": 73}, "hours must be an integer from 1 to 72"),
    ({"hours": 0}, "hours must be"),
    ({"hours": True}, "hours must be"),
])  # fmt: skip
def test_a_window_is_minutes_or_hours(config: kiq.Config, window: dict[str, int], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Metrics(config).top_jobs(now=NOW, **window)
    with pytest.raises(ValueError, match=error):
        Metrics(config).for_job("J", now=NOW, **window)


def test_the_sidekiq_wire_setting() -> None:
    assert kiq.Config.load(env={}).sidekiq_wire == 7
    assert kiq.Config.load(env={"KIQ_SIDEKIQ_WIRE": "8"}).sidekiq_wire == 8
    assert kiq.Config(sidekiq_wire=8).sidekiq_wire == 8
    for wrong in ("9", "8.0", 6, True, "eight"):
        with pytest.raises(kiq.ConfigError, match=r"sidekiq_wire.*expected one of 7, 8"):
            kiq.Config(sidekiq_wire=wrong)


def test_a_flush_writes_the_minute_of_now(config: kiq.Config, r: redis.Redis) -> None:
    """Without ``now``, the flush and the replayed query agree on the current minute's keys."""
    config.sidekiq_wire = 8
    MetricsFlusher(config).flush([recorder_of({"Now": (0, 0.001, {0: 1})})])
    now = datetime.datetime.now(UTC)  # the flush's minute, or the next one: two minutes hold it
    assert top_jobs(r, query_keys(now, minutes=2)) == {"Now": {"p": 1, "ms": 1}}
    assert top_jobs(r, query_keys(now, hours=1)) == {"Now": {"p": 1, "ms": 1}}
