"""The three limiters on a real Redis, in this process: each grants up to its limit and no more (threads contend for
real), waits up to ``wait_timeout`` for room and then raises ``OverLimit``, and checks its arguments."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest
import redis

import kiq
from kiq.plugins.limiter import OverLimit, bucket, concurrent, window
from tests.support import wait_until


def test_a_concurrent_limiter_lets_in_up_to_its_limit_and_frees_a_slot_on_exit(config: kiq.Config) -> None:
    two = concurrent("erp", 2, wait_timeout=0)
    full = r"concurrent limiter 'erp' \(2 at once\) is full \(waited 0 s\)"
    with two, two, pytest.raises(OverLimit, match=full):
        two.acquire()
    with two as lease:
        assert abs(lease.granted_at - time.time()) < 5
        assert config.redis.zcard("kiq:limiter:concurrent:erp") == 1
    assert config.redis.zcard("kiq:limiter:concurrent:erp") == 0


def test_a_limiter_shared_by_threads_gives_each_its_own_slot_back(config: kiq.Config) -> None:
    shared = concurrent("shared", 3, wait_timeout=0)
    inside = threading.Barrier(3)
    leave = threading.Event()
    tokens: list[str] = []

    def work() -> None:
        with shared as lease:
            tokens.append(lease.token)
            inside.wait()
            leave.wait(10)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(tokens) == 3, message="three threads inside")
    assert sorted(config.redis.zrange("kiq:limiter:concurrent:shared", 0, -1)) == sorted(tokens)
    leave.set()
    for thread in threads:
        thread.join()
    assert config.redis.zcard("kiq:limiter:concurrent:shared") == 0


def test_a_full_limiter_waits_for_room_up_to_wait_timeout(config: kiq.Config) -> None:
    one = concurrent("one", 1, wait_timeout=5)
    freed = threading.Event()
    holder = one.acquire()
    threading.Timer(0.3, lambda: (freed.set(), holder.release())).start()
    with one:
        assert freed.is_set()  # let in only once the holder left
    waited = time.monotonic()
    with one, pytest.raises(OverLimit):
        concurrent("one", 1, wait_timeout=0.3).acquire()
    assert time.monotonic() - waited >= 0.3


def test_a_window_never_lets_more_than_its_limit_into_any_interval(config: kiq.Config) -> None:
    grants: list[float] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(6):
            with window("burst", 5, 0.5, wait_timeout=10) as lease, lock:
                grants.append(lease.granted_at)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    grants.sort()
    assert len(grants) == 24
    # any 6 grants in a row span at least one interval: no 0.5 s ever held more than 5
    assert min(grants[i + 5] - grants[i] for i in range(len(grants) - 5)) >= 0.5 - 1e-6
    assert grants[-1] - grants[0] >= 4 * 0.5 - 1e-6  # 24 grants at 5 per 0.5 s need 4 more intervals than the first


def test_a_bucket_lets_a_burst_in_then_refills_at_its_rate(config: kiq.Config) -> None:
    limiter = bucket("mailer", 5, 1.0, wait_timeout=0)
    burst = [limiter.acquire().granted_at for _ in range(5)]
    with pytest.raises(OverLimit):
        limiter.acquire()
    refilled = bucket("mailer", 5, 1.0, wait_timeout=2).acquire()  # one token comes back every 0.2 s
    assert 0.2 - 1e-3 <= refilled.granted_at - burst[0] < 1.0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: concurrent("", 2), "a limiter's name must be a non-empty string"),
        (lambda: concurrent("x", 0), "concurrent limiter 'x': the limit must be an integer >= 1, got 0"),
        (lambda: concurrent("x", "2"), "the limit must be an integer >= 1, got '2'"),
        (lambda: concurrent("x", 2, lock_timeout=0), "lock_timeout must be > 0 seconds, got 0"),
        (lambda: window("x", 2, "1s"), "window limiter 'x': interval must be a number of seconds, got '1s'"),
        (lambda: bucket("x", 2, float("nan")), "interval must be a number of seconds, got nan"),
        (lambda: window("x", 2, wait_timeout=-1), "wait_timeout must be >= 0 seconds, got -1"),
    ],
)
def test_wrong_arguments_are_refused_with_a_clear_error(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_a_limiter_uses_the_config_it_is_given(config: kiq.Config, redis_url: str) -> None:
    other = kiq.Config(redis_url=redis_url)
    with concurrent("elsewhere", 1, config=other):
        assert config.redis.zcard("kiq:limiter:concurrent:elsewhere") == 1
    other.redis.close()


def test_limiter_keys_expire_when_unused(config: kiq.Config, r: redis.Redis) -> None:
    with concurrent("c", 1, lock_timeout=5), window("w", 1, 5.0), bucket("b", 1, 5.0):
        pass
    for key in ("kiq:limiter:window:w", "kiq:limiter:bucket:b"):
        assert 0 < r.pttl(key) <= 5000
    assert not r.exists("kiq:limiter:concurrent:c")  # its holder left: nothing to keep


def test_async_with_waits_for_room_without_blocking_the_event_loop(config: kiq.Config) -> None:
    one = concurrent("async-api", 1, wait_timeout=5, config=config)
    spans: list[tuple[float, float]] = []
    ticks: list[float] = []

    async def holder() -> None:
        async with one:
            started = time.monotonic()
            await asyncio.sleep(0.1)
            spans.append((started, time.monotonic()))

    async def ticker() -> None:  # runs on the same loop while the holders wait
        for _ in range(20):
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    async def main() -> None:
        try:
            await asyncio.gather(holder(), holder(), holder(), ticker())
        finally:
            await kiq.AsyncClient(config).close()

    asyncio.run(main())
    spans.sort()
    assert len(spans) == 3
    assert all(earlier[1] <= later[0] for earlier, later in itertools.pairwise(spans))  # one at a time
    assert max(b - a for a, b in itertools.pairwise(ticks)) < 0.09  # the loop never stalled on a waiting holder
    assert config.redis.zcard("kiq:limiter:concurrent:async-api") == 0
    with pytest.raises(OverLimit):

        async def over() -> None:
            try:
                first, second = (concurrent("async-api", 1, wait_timeout=w, config=config) for w in (0, 0.2))
                async with first, second:  # the second waits 0.2 s for the slot the first holds
                    pass
            finally:
                await kiq.AsyncClient(config).close()

        asyncio.run(over())
