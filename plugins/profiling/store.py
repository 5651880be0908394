"""Profiles in Redis, in Sidekiq 8's layout (lib/sidekiq/profiler.rb writes it, lib/sidekiq/api.rb's ProfileSet
reads it, its Web UI's Profiles page lists it):

- ``profiles``: a SORTED SET of profile keys, each scored with the epoch second it expires at (stored + a day);
  a reader first drops the members whose score has passed, then lists newest first;
- ``<token>-<jid>``: a HASH per profile, expiring a day after it is stored, with Sidekiq's fields ``started_at``
  (integer epoch seconds), ``token``, ``type`` (the job's class, or the class an ActiveJob wrapper wraps),
  ``jid``, ``elapsed`` (seconds, a float), ``data`` (the Firefox Profiler's JSON, gzip-compressed: what the Web
  UI's Data and View buttons serve) and ``size`` (bytes of ``data``); and kiq's own, which Sidekiq does not read:
  ``pyinstrument`` (pyinstrument's session JSON, gzip-compressed: kiq's call tree and flame graph), ``error`` (the
  error class of a job that raised) and ``cut`` (what was left out of a profile over ``profile_max_bytes``).

On a Redis Cluster both keys are in kiq's shared slot (``kiq.ext.keyspace``), so the write is one transaction.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis as redis_py

import kiq.ext

PROFILES = "profiles"  # ZSET: profile key -> the epoch second it expires at
EXPIRY = 86400  # seconds a profile is kept: a day, Sidekiq's Profiler::EXPIRY
FIELDS = ("started_at", "jid", "type", "token", "size", "elapsed", "error", "cut")  # what a listing reads


def profile_key(token: str, jid: str) -> str:
    """The name of a profile's hash: ``<token>-<jid>``, as Sidekiq names it."""
    return f"{token}-{jid}"


@dataclass(frozen=True)
class ProfileRecord:
    """One stored profile, as listed (its data is read apart: ``profile_data``)."""

    key: str
    started_at: int
    jid: str
    type: str
    token: str
    size: int
    elapsed: float
    error: str | None = None
    cut: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key, "started_at": self.started_at, "jid": self.jid, "type": self.type, "token": self.token,
            "size": self.size, "elapsed": self.elapsed, "error": self.error, "cut": self.cut,
        }  # fmt: skip


def save(redis: redis_py.Redis, fields: Mapping[str, str | int | float | bytes], now: float | None = None) -> str:
    """Store one profile (``fields`` as the module's doc lists them) for a day; returns its key."""
    space = kiq.ext.keyspace(redis)
    name = profile_key(str(fields["token"]), str(fields["jid"]))
    expires = (time.time() if now is None else now) + EXPIRY
    with redis.pipeline(transaction=True) as pipe:
        pipe.zadd(space.key(PROFILES), {name: expires})
        values: dict[Any, Any] = dict(fields)
        pipe.hset(space.key(name), mapping=values)
        pipe.expire(space.key(name), EXPIRY)
        pipe.execute()
    return name


def records(redis: redis_py.Redis, now: float | None = None, limit: int | None = None) -> list[ProfileRecord]:
    """The profiles kept, newest first (at most ``limit``); the expired ones are dropped from ``profiles`` first,
    as Sidekiq's ProfileSet does. A member whose hash is gone or unreadable is left out."""
    space = kiq.ext.keyspace(redis)
    index = space.key(PROFILES)
    redis.zremrangebyscore(index, "-inf", time.time() if now is None else now)
    end = -1 if limit is None else max(0, limit - 1)
    names = [str(name) for name in redis.zrevrange(index, 0, end)]  # text: kiq's clients decode replies
    with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hmget(space.key(name), FIELDS)
        rows = pipe.execute()
    found = []
    for name, row in zip(names, rows, strict=True):
        record = _record(name, row)
        if record is not None:
            found.append(record)
    return found


def record(redis: redis_py.Redis, name: str) -> ProfileRecord | None:
    """The profile ``name`` (``<token>-<jid>``), or None when it is gone."""
    return _record(name, redis.hmget(kiq.ext.keyspace(redis).key(name), FIELDS))


def profile_data(redis: redis_py.Redis, name: str, field: str) -> bytes | None:
    """One stored field of profile ``name`` as bytes (``data``: gzip of the Firefox Profiler's JSON;
    ``pyinstrument``: gzip of pyinstrument's session), or None when absent."""
    value = redis.hget(kiq.ext.keyspace(redis).key(name), field)
    if value is None:
        return None
    return value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogateescape")


def _record(name: str, row: list[Any]) -> ProfileRecord | None:
    started_at, jid, type_, token, size, elapsed, error, cut = (None if v is None else _text(v) for v in row)
    if started_at is None or jid is None or token is None:
        return None  # expired between the listing and the read, or not a profile
    try:
        return ProfileRecord(
            name, int(float(started_at)), jid, type_ or "", token, int(size or 0), float(elapsed or 0.0), error, cut
        )
    except ValueError:
        return None


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
