"""The ``it-<jid>`` hash: reads, flushes, cancellation and clearing against a real Redis."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

import kiq
from kiq.async_client import async_redis
from kiq.iteration import state
from kiq.keys import ITERATION_TTL

JID = "0123456789abcdef01234567"


def test_no_state_reads_none(r: redis.Redis) -> None:
    assert state.read(r, JID) is None


def test_flush_writes_the_fields_and_a_ttl_set_once(r: redis.Redis) -> None:
    assert state.flush(r, JID, 1, {"id": 42, "name": "é"}, 0) is False
    assert r.hgetall(f"it-{JID}") == {"ex": "1", "c": '{"id":42,"name":"é"}', "rt": "0"}
    assert ITERATION_TTL - 5 <= r.ttl(f"it-{JID}") <= ITERATION_TTL
    r.expire(f"it-{JID}", 100)
    state.flush(r, JID, 2, [1, 2], 12.5)
    if state.expire_nx(r):  # NX: a later flush does not push the expiry back
        assert r.ttl(f"it-{JID}") <= 100
    else:  # Redis 6.2: Sidekiq 7.3's plain EXPIRE
        assert r.ttl(f"it-{JID}") > 100
    read = state.read(r, JID)
    assert read == kiq.IterationState(jid=JID, executions=2, cursor=[1, 2], runtime=12.5, cancelled_at=None)
    assert not read.cancelled


def test_cancel_is_set_once_and_seen_by_the_next_flush(config: kiq.Config, r: redis.Redis) -> None:
    before = int(time.time())
    first = kiq.cancel(JID, config)
    assert before <= first <= time.time()
    r.hset(f"it-{JID}", "cancelled", "1")  # a second cancel keeps what is there (HSETNX)
    assert state.cancel(r, JID) == 1
    assert ITERATION_TTL - 5 <= r.ttl(f"it-{JID}") <= ITERATION_TTL
    assert state.flush(r, JID, 1, None, 0) is True
    read = state.read(r, JID)
    assert read is not None and read.cancelled and read.cancelled_at == 1 and read.cursor is None


def test_async_forms(config: kiq.Config, r: redis.Redis) -> None:
    async def run() -> tuple[int, bool, kiq.IterationState | None]:
        cancelled = await kiq.cancel.aio(JID, config)
        flushed = await state.aflush(async_redis(config), JID, 3, "abc", 1.5)
        read = await state.aread(async_redis(config), JID)
        await state.aclear(async_redis(config), JID)
        return cancelled, flushed, read

    cancelled, flushed, read = asyncio.run(run())
    assert flushed is True
    assert read == kiq.IterationState(jid=JID, executions=3, cursor="abc", runtime=1.5, cancelled_at=cancelled)
    assert not r.exists(f"it-{JID}")


def test_clear_removes_the_state(r: redis.Redis) -> None:
    state.flush(r, JID, 1, 5, 0)
    state.clear(r, JID)
    assert state.read(r, JID) is None


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0"), (0.0, "0.0"), (12.25, "12.25"), (1e-05, "1.0e-05"), (1.5e-07, "1.5e-07"), (3e16, "3.0e+16")],
)
def test_runtime_is_written_as_ruby_prints_it(value: float, text: str) -> None:
    assert state.ruby_number(value) == text


def test_a_cursor_that_is_not_json_is_refused_before_any_write(r: redis.Redis) -> None:
    with pytest.raises(TypeError, match="JSON-native"):
        state.flush(r, JID, 1, object(), 0)
    assert not r.exists(f"it-{JID}")


def test_bad_fields_read_leniently_but_a_bad_cursor_is_named(r: redis.Redis) -> None:
    r.hset(f"it-{JID}", mapping={"ex": "x", "rt": "", "c": "7"})
    assert state.read(r, JID) == kiq.IterationState(jid=JID, executions=0, cursor=7, runtime=0.0, cancelled_at=None)
    r.hset(f"it-{JID}", "c", "{nope")
    with pytest.raises(ValueError, match=f"it-{JID} holds a cursor that is not JSON"):
        state.read(r, JID)


def test_cancel_needs_a_jid(config: kiq.Config) -> None:
    with pytest.raises(ValueError, match="job id"):
        kiq.cancel("", config)
