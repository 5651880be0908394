"""Orphan recovery against a real Redis: dead processes' working lists go back to their queues, poison pills go
to the dead set with the death hooks, one process recovers at a time, and keys are found with SCAN."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
import redis

import kiq
from kiq.fetcher import Capsule
from kiq.payload import dumps, loads
from kiq.plugins.reliable_fetch import InterruptedJobError, ReliableFetch, recover_orphans
from tests.support import raw_redis

ME = "me:1:aaaaaaaaaaaa"
DEAD = "gone:2:bbbbbbbbbbbb"
ORPHANED = f"kiq:working:{DEAD}:default"


@pytest.fixture
def recovering(config: kiq.Config, r: redis.Redis) -> kiq.Config:
    """``config`` with the plugin registered and this test's process (ME) alive."""
    config.add_plugin("reliable_fetch")
    r.set(f"kiq:alive:{ME}", "1", px=10_000)
    return config


class DeathRecorder:
    def __init__(self) -> None:
        self.deaths: list[tuple[dict[str, Any], BaseException | None]] = []

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any], exc: BaseException | None, config: kiq.Config) -> None:
        self.deaths.append((job, exc))


@pytest.fixture
def deaths(recovering: kiq.Config) -> DeathRecorder:
    recorder = DeathRecorder()
    recovering.plugins.register(recorder)
    return recorder


def job(jid: str, queue: str = "default", **extra: Any) -> str:
    return dumps({"class": "Noop", "args": [], "jid": jid, "queue": queue, **extra})


def orphan(r: redis.Redis, *jobs: str, key: str = ORPHANED) -> None:
    """Jobs as a fetcher leaves them: the first fetched is the rightmost."""
    for item in jobs:
        r.lpush(key, item)


def test_a_dead_process_list_goes_to_the_back_of_its_queues_with_its_interruption_counted(
    recovering: kiq.Config, r: redis.Redis
) -> None:
    r.lpush("queue:default", job("waiting"))
    orphan(r, job("first"), job("second"), job("other", queue="low"))
    report = recover_orphans(recovering, ME)
    assert report is not None and (report.lists, report.requeued, report.dead) == (1, 3, 0)
    queue = [loads(item) for item in r.lrange("queue:default", 0, -1)]
    # behind the jobs that were waiting (a crash loop must not keep hitting them), in their order
    assert [item["jid"] for item in queue] == ["second", "first", "waiting"]
    assert [item["interrupted_count"] for item in queue[:2]] == [1, 1]
    assert loads(r.lindex("queue:low", 0))["jid"] == "other"
    assert not r.exists(ORPHANED, f"kiq:recovering:{ME}")


def test_a_live_process_list_is_left_alone(recovering: kiq.Config, r: redis.Redis) -> None:
    r.set(f"kiq:alive:{DEAD}", "1", px=10_000)
    orphan(r, job("running"))
    assert recover_orphans(recovering, ME) is not None
    assert r.llen(ORPHANED) == 1
    assert not r.exists("queue:default")


def test_interruptions_add_up_across_recoveries(recovering: kiq.Config, r: redis.Redis) -> None:
    orphan(r, job("again", interrupted_count=1))
    recover_orphans(recovering, ME)
    assert loads(r.lindex("queue:default", 0))["interrupted_count"] == 2


@pytest.mark.parametrize(("wire", "form"), [(7, float), (8, int)])
def test_at_the_cap_the_job_goes_to_dead_and_the_death_hooks_run(
    recovering: kiq.Config, r: redis.Redis, deaths: DeathRecorder, wire: int, form: type
) -> None:
    recovering.sidekiq_wire = wire  # failed_at as float seconds, or Sidekiq 8's integer ms
    orphan(r, job("poison", interrupted_count=2), job("fine"))
    report = recover_orphans(recovering, ME)
    assert report is not None and (report.requeued, report.dead) == (1, 1)
    [(dead_json, _)] = r.zrange("dead", 0, -1, withscores=True)
    dead = loads(dead_json)
    assert dead["jid"] == "poison" and dead["interrupted_count"] == 3
    assert dead["error_class"] == "kiq.plugins.reliable_fetch.recovery.InterruptedJobError"
    assert "died 3 times" in dead["error_message"] and type(dead["failed_at"]) is form
    [(hook_job, exc)] = deaths.deaths
    assert hook_job["jid"] == "poison" and isinstance(exc, InterruptedJobError)
    assert [loads(item)["jid"] for item in r.lrange("queue:default", 0, -1)] == ["fine"]


def test_the_cap_comes_from_the_job_or_the_setting(recovering: kiq.Config, r: redis.Redis) -> None:
    recovering.reliable_max_interrupts = 5
    orphan(r, job("strict", max_interrupts=1), job("lenient", interrupted_count=3))
    recover_orphans(recovering, ME)
    assert [loads(item)["jid"] for item in r.zrange("dead", 0, -1)] == ["strict"]
    assert loads(r.lindex("queue:default", 0))["interrupted_count"] == 4


def test_a_job_that_is_not_json_goes_to_dead_without_hooks(
    recovering: kiq.Config, r: redis.Redis, deaths: DeathRecorder
) -> None:
    orphan(r, "{not json", job("fine"))
    report = recover_orphans(recovering, ME)
    assert report is not None and (report.requeued, report.dead) == (1, 1)
    assert r.zrange("dead", 0, -1) == ["{not json"]
    assert deaths.deaths == []


def test_the_lease_lets_one_recovery_run_per_interval(recovering: kiq.Config, r: redis.Redis) -> None:
    other = "other:3:cccccccccccc"
    r.set(f"kiq:alive:{other}", "1", px=10_000)
    assert recover_orphans(recovering, ME) is not None
    orphan(r, job("late"))
    assert recover_orphans(recovering, other) is None
    assert recover_orphans(recovering, ME) is None  # not even the holder runs twice within the interval
    assert r.llen(ORPHANED) == 1
    assert 0 < r.pttl("kiq:reliable:recovery-lease") <= 30_000
    r.delete("kiq:reliable:recovery-lease")  # the interval is over
    assert recover_orphans(recovering, other) is not None
    assert not r.exists(ORPHANED)


def test_a_process_that_is_not_alive_does_not_recover(recovering: kiq.Config, r: redis.Redis) -> None:
    orphan(r, job("x"))
    assert recover_orphans(recovering, "unknown:4:dddddddddddd") is None
    assert r.llen(ORPHANED) == 1


def test_a_dead_recoverers_claim_is_recovered_too(recovering: kiq.Config, r: redis.Redis) -> None:
    orphan(r, job("claimed"), key=f"kiq:recovering:{DEAD}")
    recover_orphans(recovering, ME)
    assert loads(r.lindex("queue:default", 0))["jid"] == "claimed"


def test_recovery_finds_lists_with_scan_never_keys(recovering: kiq.Config, r: redis.Redis, redis_url: str) -> None:
    """Run recovery as a Redis user that may not call KEYS: it works, so it never did."""
    user, password = f"kiq-no-keys-{secrets.token_hex(4)}", secrets.token_hex(16)
    r.acl_setuser(user, enabled=True, passwords=[f"+{password}"], keys=["*"], commands=["+@all", "-keys"])
    try:
        restricted = kiq.Config(redis_url=redis_url)
        restricted.add_plugin("reliable_fetch")
        pool = recovering.redis.connection_pool
        restricted._redis = redis.Redis(
            connection_pool=redis.ConnectionPool(
                connection_class=pool.connection_class,
                **{**pool.connection_kwargs, "username": user, "password": password},
            )
        )
        with pytest.raises(redis.exceptions.NoPermissionError):
            restricted.redis.keys("kiq:*")
        orphan(r, *(job(f"j{i}") for i in range(3)))
        for index in range(1200):  # more keys than one SCAN step returns
            r.set(f"filler:{index}", "x")
        report = recover_orphans(restricted, ME)
        assert report is not None and report.requeued == 3
        restricted.redis.close()
    finally:
        r.acl_deluser(user)


def test_a_killed_fetchers_jobs_come_back_for_another_process(recovering: kiq.Config, r: redis.Redis) -> None:
    """The whole path: a fetcher takes jobs, its process dies (liveness gone, nothing cleaned up), and a live
    process's recovery returns them, the buffered one included."""
    for item in (job("a"), job("b")):
        r.lpush("queue:default", item)
    fetch = ReliableFetch(Capsule("default", [("default", 0)], 2, recovering, DEAD))
    unit = fetch.retrieve_work()
    assert unit is not None
    # the process is gone: no stop, no more heartbeats
    r.delete(f"kiq:alive:{DEAD}")
    report = recover_orphans(recovering, ME)
    assert report is not None and report.requeued == 1
    assert [loads(item)["jid"] for item in r.lrange("queue:default", 0, -1)] == ["a", "b"]  # "a" at the back
    assert loads(r.lindex("queue:default", 0))["interrupted_count"] == 1


def test_a_fetchers_heartbeat_recovers_orphans(recovering: kiq.Config, r: redis.Redis) -> None:
    orphan(r, job("x"))
    fetch = ReliableFetch(Capsule("default", [("default", 0)], 2, recovering, ME))
    try:
        fetch.heartbeat()
        assert not r.exists(ORPHANED)
        orphan(r, job("y"))
        fetch.heartbeat()  # within the lease's interval: another process's turn (here: nobody's)
        assert r.exists(ORPHANED)
        r.delete("kiq:reliable:recovery-lease")
        fetch.heartbeat()
        assert not r.exists(ORPHANED)
    finally:
        fetch.close()


def test_a_payload_that_is_not_utf8_goes_to_dead_as_stored_and_other_orphans_are_still_recovered(
    recovering: kiq.Config, r: redis.Redis
) -> None:
    raw = raw_redis(recovering)
    bad = b'{"class":"Noop","args":["\xff"],"jid":"bad","queue":"default"}'
    raw.lpush(ORPHANED, job("a1").encode(), bad, job("a2").encode())
    other = "kiq:working:gone-too:3:cccccccccccc:default"
    orphan(r, job("b1"), key=other)
    for _ in range(2):  # a second pass finds nothing left over
        recover_orphans(recovering, ME)
        r.delete("kiq:reliable:recovery-lease")
    assert sorted(loads(item)["jid"] for item in r.lrange("queue:default", 0, -1)) == ["a1", "a2", "b1"]
    assert raw.zrange("dead", 0, -1) == [bad]
    assert not r.exists(ORPHANED, other, f"kiq:recovering:{ME}")
