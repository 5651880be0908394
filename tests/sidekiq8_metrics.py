"""Sidekiq 8's job-metrics code (sidekiq/sidekiq at 1bb4aa06, v8.1.7), replayed in Python for the tests, since Ruby
3.2 and Sidekiq 8 cannot run here: what ``Metrics::Query`` (lib/sidekiq/metrics/query.rb) reads and how it parses it,
and what ``ExecutionTracker#flush`` (lib/sidekiq/metrics/tracking.rb) with ``Histogram#persist``
(lib/sidekiq/metrics/shared.rb) writes. Key names come from strftime with Ruby's own formats (glibc's strftime
knows ``%-H``), not from kiq.keys, so a mistake in either shows."""

from __future__ import annotations

import datetime

import redis


# -- Sidekiq 8's Metrics::Query, replayed ------------------------------------------------------------------
def minutely_key(at: datetime.datetime) -> str:
    # query.rb:24  minutely: [60, ->(time) { time.strftime("j|%y%m%d|%-H:%M") }]  (glibc's strftime knows %-H)
    return at.strftime("j|%y%m%d|%-H:%M")


def hourly_key(at: datetime.datetime) -> str:
    # query.rb:26-30  hourly: [600, ->(time) { m = time.min; mins = (m < 10) ? "0" : m.to_s[0]; ... "%-H:#{mins}" }]
    mins = "0" if at.minute < 10 else str(at.minute)[0]
    return at.strftime(f"j|%y%m%d|%-H:{mins}")


def histogram_key(klass: str, at: datetime.datetime) -> str:
    # shared.rb:88-89  window = now.utc.strftime("%-d-%-H:%-M"); key = "h|#{@klass}-#{window}"
    return f"h|{klass}-" + at.strftime("%-d-%-H:%-M")


def query_keys(now: datetime.datetime, minutes: int | None = None, hours: int | None = None) -> list[str]:
    """The hashes ``top_jobs``/``for_job`` read, newest first (query.rb:39-58): ``hours * 6`` steps of 600 s, or
    ``minutes`` steps of 60 s, from ``now`` (not truncated) backwards."""
    if hours is None:
        minutes = 60 if minutes is None else min(minutes, 480)  # query.rb:39-42: the default and the DoS cap
    count, stride, key_of = (hours * 6, 600, hourly_key) if hours else (minutes or 60, 60, minutely_key)
    return [key_of(now - datetime.timedelta(seconds=stride * step)) for step in range(count)]


def top_jobs(r: redis.Redis, keys: list[str]) -> dict[str, dict[str, int]]:
    """query.rb:51-70: HGETALL each hash, ``kls, metric = k.split("|")``, ``v.to_i`` summed per class and metric."""
    totals: dict[str, dict[str, int]] = {}
    for key in keys:
        for field, value in r.hgetall(key).items():
            kls, metric = field.split("|")[:2]  # Ruby's destructuring keeps the first two parts
            totals.setdefault(kls, {}).setdefault(metric, 0)
            totals[kls][metric] += int(value)
    return totals


def for_job_histogram(r: redis.Redis, klass: str, at: datetime.datetime) -> list[int]:
    """query.rb:107 and shared.rb:56-62, 87-91: ``BITFIELD_RO key GET u16 #0 ... GET u16 #25`` (Query reverses
    the list for its chart; the order here is the buckets')."""
    fetch = [word for index in range(26) for word in ("GET", "u16", f"#{index}")]
    return [int(count) for count in r.execute_command("BITFIELD_RO", histogram_key(klass, at), *fetch)]


# -- Sidekiq 8's ExecutionTracker#flush, replayed -------------------------------------------------------------
MID_TERM, SHORT_TERM = 3 * 24 * 60 * 60, 8 * 60 * 60  # tracking.rb:54-55; shared.rb:63 HISTOGRAM_TTL = SHORT_TERM


def flush(
    r: redis.Redis, at: datetime.datetime, klass: str, processed: int, failed: int = 0, ms: int | None = None,
    buckets: dict[int, int] | None = None,
) -> None:  # fmt: skip
    """What one flush at ``at`` writes for one class (tracking.rb:57-101): the histogram (shared.rb:93-106:
    ``BITFIELD key OVERFLOW SAT INCRBY u16 #i n``, EXPIRE 8 hours), then HINCRBY into the 10-minute hash (the minute
    key without its last digit, tracking.rb:66, EXPIRE 3 days) and the minute hash (EXPIRE 8 hours). ``ms`` is
    written for a class that had a success (tracking.rb:105-110)."""
    if buckets:
        key = histogram_key(klass, at)
        increments = [word for index, count in buckets.items() for word in ("INCRBY", "u16", f"#{index}", count)]
        r.execute_command("BITFIELD", key, "OVERFLOW", "SAT", *increments)
        r.expire(key, SHORT_TERM)
    minute = at.strftime("%y%m%d|%-H:%M")
    for bucket, ttl in ((minute[:-1], MID_TERM), (minute, SHORT_TERM)):
        stats = f"j|{bucket}"
        if failed:
            r.hincrby(stats, f"{klass}|f", failed)
        if ms is not None:
            r.hincrby(stats, f"{klass}|ms", ms)
        r.hincrby(stats, f"{klass}|p", processed)
        r.expire(stats, ttl)
