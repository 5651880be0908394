"""Crash safety with reliable fetch: a worker killed with SIGKILL mid-run loses no grouped job, its slots come back
within the lease, and the limits hold after recovery; Redis stopped 3 s mid-run loses nothing, logged once."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import kiq
from tests.jobs.groups import SPANS, STARTS, Sleeps
from tests.outage_support import AofRedis, aof_redis
from tests.plugins.groups.test_concurrency import most_at_once, spans_of
from tests.support import InProcessWorker, WorkerProcess, wait_until

pytestmark = pytest.mark.slow

GROUPS = ("g1", "g2", "g3", "g4")
ENV = {
    "KIQ_HEARTBEAT_INTERVAL": "1",
    "KIQ_PLUGINS": "groups,reliable_fetch",
    "KIQ_FETCH": "reliable",
    "KIQ_RELIABLE_RECOVERY_INTERVAL": "1",
    "KIQ_GROUP_CONCURRENCY": "2",
}
WORKER = ("-r", "tests.jobs.groups", "-c", "10")


def leases(r: redis.Redis) -> dict[str, float]:
    key = kiq.ext.keyspace(r).queue_scoped("kiq:groups:", "default") + "l"
    return dict(r.zrange(key, 0, -1, withscores=True))


def test_a_killed_reliable_worker_loses_no_grouped_job_and_its_slots_come_back(
    e2e_config: kiq.Config,
    start_worker_process: Callable[..., WorkerProcess],
    start_worker: Callable[..., InProcessWorker],
) -> None:
    e2e_config.add_plugin("groups")
    r = e2e_config.redis
    labels = [f"{group}-{n}" for group in GROUPS for n in range(20)]
    for label in labels:
        Sleeps.set(group=label[:2]).perform_async(150, label)
    victim = start_worker_process(*WORKER, env=ENV)
    wait_until(lambda: r.llen(SPANS) >= 12, 30, message="jobs under way")
    victim.kill()  # SIGKILL: its running jobs and their slots stay behind
    killed_at = time.time()
    orphaned = leases(r)
    assert orphaned, "the victim held slots"
    survivor = start_worker(*WORKER, env=ENV)

    def orphans_gone() -> bool:  # each slot the victim held expired (or was taken over with its recovered job)
        now = leases(r)
        return all(now.get(member) != score for member, score in orphaned.items())

    wait_until(orphans_gone, 15, interval=0.05, message="the victim's slots back")
    slots_back = time.time() - killed_at
    wait_until(lambda: _finished(r) >= set(labels), 60, interval=0.2, message="every job done")
    runs = len(r.lrange(STARTS, 0, -1))
    assert survivor.stop() == 0, survivor.output()
    spans = spans_of(r)
    after = {group: most_at_once([s for s in spans[group] if s[0] > killed_at]) for group in GROUPS}
    handles = [kiq.Queue("default").group(group) for group in GROUPS]
    print(
        f"\n{len(orphaned)} slots orphaned, back in {slots_back:.2f} s; {runs} runs of {len(labels)} jobs (0 lost); "
        f"at most at once after the kill: {after}"
    )
    assert slots_back < 10.0
    assert all(peak <= 2 for peak in after.values())
    assert all(handle.running == 0 and handle.size == 0 for handle in handles)
    assert leases(r) == {}


def _finished(r: redis.Redis) -> set[str]:
    return {span[3] for span in map(json.loads, r.lrange(SPANS, 0, -1))}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AofRedis]:
    with aof_redis(tmp_path / "redis") as aof:
        yield aof


def test_redis_stopped_3_s_mid_run_loses_no_grouped_job_and_is_logged_once(
    server: AofRedis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = tmp_path / "done.txt"
    done.touch()
    monkeypatch.setenv("GROUPS_TEST_FILE", str(done))  # read by the jobs, in this process
    config = kiq.Config(redis_url=server.url, plugins=["groups"])
    labels = [f"{group}-{n}" for group in GROUPS for n in range(75)]
    try:
        for group in GROUPS:
            kiq.Client(config).push_bulk(
                {
                    "class": "GroupsQuiet",
                    "group": group,
                    "args": [[20, label] for label in labels if label[:2] == group],
                }
            )
    finally:
        config.redis.close()
    client = server.client()

    def finished() -> set[str]:
        return set(done.read_text().split())

    with InProcessWorker(WORKER, server.url, ENV) as worker:  # the outage, not the worker's process, is the subject
        wait_until(lambda: len(finished()) >= 50, 30, message="50 jobs before the outage")
        server.stop()
        wait_until(lambda: "unreachable" in worker.output(), 30, message="the outage in the log")
        time.sleep(3)  # the outage's length, not a wait for a condition
        server.start()
        wait_until(lambda: finished() >= set(labels), 30, message="every job done")
        wait_until(lambda: "Redis works again" in worker.output(), 10, message="the end of the outage in the log")
        base = kiq.ext.Keyspace().queue_scoped("kiq:groups:", "default")
        wait_until(lambda: not client.hgetall(base + "c"), 10, message="every slot back")
        assert worker.stop() == 0
        output = worker.output()
    print(f"\n{len(labels)} jobs through a 3 s outage: {len(finished())} done, {len(done.read_text().split())} runs")
    assert output.count("is unreachable") == 1 and output.count("Redis works again") == 1, output
    assert "could not release" not in output
    assert client.zcard(base + "l") == 0
