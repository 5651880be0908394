"""Sentinel for real: a master, a replica and three Sentinels; a failover forced in the middle of a drain, while a
client pushes. Workers and clients follow the new master without a restart, and the jobs lost or run twice are
counted, with basic and with reliable fetch (the figures in the README come from these runs)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import kiq
import kiq.ext
import kiq.redis
from kiq.server.heartbeat import MASTER_CHECK_INTERVAL
from tests.jobs.basic import AppendToFile
from tests.sentinel_support import SentinelCluster
from tests.support import FAST, InProcessWorker, connection_ids, wait_until

pytestmark = pytest.mark.slow  # a master, a replica and three Sentinels per test, and a drain of ~20 s
TOTAL = 1000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SentinelCluster]:
    running = SentinelCluster(tmp_path).start()
    yield running
    running.stop()


@pytest.fixture(params=[0, 1], ids=["no-wait", "push-replicas-1"])
def sentinel_config(cluster: SentinelCluster, request: pytest.FixtureRequest) -> Iterator[kiq.Config]:
    """The client's config on the Sentinel URL; with push_replicas 1, a push returns once the replica has it."""
    config = kiq.Config(redis_url=cluster.url, push_replicas=request.param)
    previous = kiq.config._default
    kiq.config.set_default_config(config)
    yield config
    kiq.config._default = previous


@pytest.mark.parametrize("fetch", ["basic", "reliable"])
def test_a_failover_mid_drain_is_followed_without_a_restart(
    cluster: SentinelCluster, sentinel_config: kiq.Config, tmp_path: Path, fetch: str
) -> None:
    r = sentinel_config.redis
    done = tmp_path / "done.txt"  # outside Redis: a failover loses Redis writes, and the record must survive it
    done.touch()
    late: list[str | None] = []

    def push_during_failover() -> None:  # a client pushing one by one through the failover
        for _ in range(100):
            while True:
                try:
                    late.append(AppendToFile.perform_async(str(done), 0.05))
                    break
                except (redis.RedisError, kiq.NotReplicated):
                    time.sleep(0.05)  # the application's retry (after NotReplicated the job may run twice)
            time.sleep(0.02)

    # the worker shares the clients' push_replicas; heartbeats 5 s apart, so the checks between them move it
    env = {**FAST, "KIQ_HEARTBEAT_INTERVAL": "5", "KIQ_PUSH_REPLICAS": str(sentinel_config.push_replicas)}
    with InProcessWorker(["-r", "tests.jobs.basic", "--fetch", fetch], cluster.url, env) as worker:
        # idle first, as a worker is before its load comes: its fetch waits on connections it keeps (a reliable
        # fetcher's parked moves), which must follow the new master too
        master = cluster.client("a")
        # a blocking fetch: the basic fetcher's pop, the reliable one's parked move
        wait_until(lambda: connection_ids(master, ("brpop", "blmpop", "blmove")), 10, message="the fetch to wait")
        master.close()
        pushed = list(AppendToFile.perform_bulk([[str(done), 0.05]] * TOTAL))
        wait_until(lambda: len(done.read_text().split()) >= 100, 30, message="the drain to be under way")
        pusher = threading.Thread(target=push_during_failover)
        pusher.start()
        old = cluster.master_port()
        started = time.monotonic()
        new = cluster.failover()
        switched = time.monotonic() - started  # the Sentinels name the new master: from here the worker follows
        assert new != old
        pusher.join(60)
        expected = set(pushed) | set(late)
        wait_until(lambda: drained(r, done), 120, message="the queue to be drained and the workers idle")
        finished = done.read_text().split()
        assert worker.running, worker.output()  # followed the new master: the same worker, still running
        output = worker.output()
        assert worker.stop() == 0
    lost = len(expected - set(finished))
    duplicated = len(finished) - len(set(finished))
    replicas = sentinel_config.push_replicas
    print(
        f"\n{fetch} fetch, push_replicas={replicas}: {len(expected)} jobs, {lost} lost, {duplicated} ran twice, "
        f"the Sentinels named the new master {switched:.1f} s after the failover began"
    )
    assert len(late) == 100 and None not in late
    # twice at most: once from the old master, once from the new one's copy (a third run came from a connection
    # that connected again to the demoted master and read a working list from its stale copy)
    assert max(Counter(finished).values()) <= 2, Counter(Counter(finished).values())
    assert "Traceback" not in output
    assert output.count("retrying with backoff") <= 2, output  # logged once (fetch and heartbeat at most)
    failovers = [line for line in output.splitlines() if "Redis failed over" in line]
    assert failovers == [failovers[0]] and f"now 127.0.0.1:{new} (was 127.0.0.1:{old})" in failovers[0], failovers
    if replicas:  # every push confirmed by the replica that became the master: none can be lost
        assert lost == 0
        # Run twice: only the jobs taken from the old master between the promotion and the moment the worker
        # follows the new one (at most MASTER_CHECK_INTERVAL after the Sentinels name it; the old master takes
        # writes for seconds more, and discards them when it is demoted). 10 threads of 50 ms jobs: <= 200 a second.
        window = switched + MASTER_CHECK_INTERVAL + 0.5
        assert duplicated <= 200 * window + 10, f"{duplicated} ran twice; the window was at most {window:.1f} s"


def drained(r: redis.Redis, done: Path) -> bool:
    """The queue empty, and no job finished for a second (the ones in flight ended)."""
    before = done.read_text().count("\n")
    time.sleep(1)
    return r.llen("queue:default") == 0 and done.read_text().count("\n") == before


def test_a_connection_that_drops_after_a_failover_connects_again_to_the_new_master(cluster: SentinelCluster) -> None:
    """redis-py connects a dropped connection again to the address it had when a command is sent on it
    (redis/redis-py#3874): after a failover, the old master, which takes writes until the Sentinels demote it and
    then discards them, and once demoted answers reads from a copy that may lag. kiq's Sentinel connections ask the
    Sentinels each time (kiq.sentinel). Here: ``run_pipeline``'s shelved connection (the pushes', a reliable
    fetcher's acknowledgements and comparisons) and one of the asyncio client, each cut as the demotion cuts them."""
    client = kiq.Config(redis_url=cluster.url).redis
    old, new = cluster.client("a"), cluster.client("b")  # "a" is the first master

    async def scenario() -> None:
        aio = kiq.redis.connect_async(cluster.url)
        kept = await aio.connection_pool.get_connection()
        await kept.send_command("PING")  # connected to "a"
        assert await kept.read_response() == "PONG"
        kiq.ext.run_pipeline(client, [("PING",)])  # its connection waits on the shelf, connected to "a"
        cluster.failover()  # (blocking this loop, on which nothing else runs)
        old.client_kill_filter(_type="normal")  # every client of the old master but this one (SKIPME)
        kiq.ext.run_pipeline(client, [("SET", "kiq-test:sync", "1")])
        await kept.disconnect()  # as redis-py does on the error the cut brings, before it sends again
        await kept.send_command("SET", "kiq-test:async", "1")  # this connects again
        assert await kept.read_response() == "OK"
        await aio.aclose(close_connection_pool=True)

    try:
        asyncio.run(scenario())
        assert new.mget("kiq-test:sync", "kiq-test:async") == ["1", "1"]
        assert old.mget("kiq-test:sync", "kiq-test:async") == [None, None]
    finally:
        client.close()
        old.close()
        new.close()
