"""Failover of a Redis Cluster in the middle of a drain on reliable fetch: a primary killed (kill -9), and separately a
manual ``CLUSTER FAILOVER`` on its replica, while one worker (what ``kiq worker`` runs, in the test's process) drains
10,000 jobs and a client pushes one by one. Each test starts a cluster of its own (it breaks it) and checks that no
job is lost, that the worker follows the new primary by itself (the same worker, never restarted, which drains
everything) and logs the outage once; it prints the numbers of docs/guide/redis.md's "Failover" table: jobs lost,
jobs run twice, seconds until the cluster was healthy again and until jobs of the failed primary ran again
(``pytest -s tests/test_cluster_failover.py``).

The jobs write their trace to a file (tests.jobs.failover.AppendStarted), not to Redis, which loses the writes its
killed primary had not passed to its replica yet."""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

import kiq
import kiq.ext
from tests.cluster_support import EVERY_CLUSTER_TARGET, LoopbackCluster, Node, started_cluster
from tests.jobs.failover import AppendStarted
from tests.support import FAST, InProcessWorker, fresh_config, wait_until

pytestmark = pytest.mark.slow  # a 6-node cluster of its own per test, and a drain of 10,000 jobs
TOTAL = 10_000
LATE = 100  # jobs a client pushes one by one through the failover
QUEUE_COUNT = 3  # the queue layout's queues, on 3 distinct primaries


@dataclass(frozen=True)
class Case:
    server: str  # tests/cluster_support.py's SERVERS
    slots: str  # kiq's layout
    event: str  # "kill": kill -9 of the primary; "failover": CLUSTER FAILOVER on its replica

    @property
    def id(self) -> str:
        return f"{self.server}-{self.slots}-{self.event}"


EVERY_CASE = [
    ("redis7", "one", "kill"),
    ("redis7", "queue", "kill"),
    ("redis7", "one", "failover"),
    ("redis7", "queue", "failover"),
    ("valkey9", "one", "kill"),
    ("valkey9", "queue", "kill"),
    ("valkey9", "one", "failover"),
]
# By default each pair of two factors' values runs once (server and layout, server and event, layout and event): 4
# of the cases; KIQ_TEST_CLUSTER=all runs every one.
PAIRWISE = [("redis7", "one", "kill"), ("redis7", "queue", "failover"), ("valkey9", "queue", "kill"),
            ("valkey9", "one", "failover")]  # fmt: skip
CASES = [Case(*case) for case in (EVERY_CASE if EVERY_CLUSTER_TARGET else PAIRWISE)]


@pytest.fixture(params=CASES, ids=[case.id for case in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    chosen: Case = request.param
    return chosen


@pytest.fixture
def cluster(case: Case, tmp_path: Path) -> Iterator[LoopbackCluster]:
    directory = tmp_path / "cluster"
    directory.mkdir()
    yield from started_cluster(directory, case.server)


@pytest.fixture
def config(cluster: LoopbackCluster, case: Case) -> Iterator[kiq.Config]:
    yield from fresh_config(cluster.url, empty=cluster.flush, slots=case.slots)


def test_a_failover_mid_drain_loses_no_job_and_the_worker_follows(
    case: Case, cluster: LoopbackCluster, config: kiq.Config, tmp_path: Path
) -> None:
    r = config.redis
    keys = kiq.ext.keyspace(r)
    queues, victim = chosen_queues(cluster, r, case.slots)
    primary = owner(cluster, r, keys.queue(victim))
    done = tmp_path / "done.txt"  # outside Redis: a killed primary loses the writes its replica did not get yet
    done.touch()
    pushed: dict[str, str] = {}  # jid -> queue
    for index, queue in enumerate(queues):
        share = TOTAL // len(queues) + (index < TOTAL % len(queues))
        jids = AppendStarted.set(queue=queue).perform_bulk([[str(done)]] * share)
        pushed.update(dict.fromkeys((jid for jid in jids if jid is not None), queue))
    assert len(pushed) == TOTAL
    late: list[str | None] = []
    refused: list[redis.RedisError] = []

    def push_through_the_failover() -> None:  # a client pushing one by one to the failing primary's queue
        for _ in range(LATE):
            while True:
                try:
                    late.append(AppendStarted.set(queue=victim).perform_async(str(done)))
                    break
                except redis.RedisError as exc:
                    refused.append(exc)
                    time.sleep(0.05)  # the application's retry
            time.sleep(0.02)

    # heartbeats 5 s apart, as in tests/test_sentinel.py: the liveness of reliable fetch (3 heartbeats) outlasts the
    # outage, so the worker's own running jobs are not taken for orphans
    env = {**FAST, "KIQ_HEARTBEAT_INTERVAL": "5", "KIQ_SLOTS": case.slots}
    weighted = [arg for queue in queues for arg in ("-q", f"{queue},1")]  # every queue drains at once
    args = ["-r", "tests.jobs.failover", "--fetch", "reliable", *weighted]
    with InProcessWorker(args, cluster.url, env) as worker:
        wait_until(lambda: len(done.read_text().splitlines()) >= 1000, 60, message="the drain to be under way")
        pusher = threading.Thread(target=push_through_the_failover)
        pusher.start()
        backlog = TOTAL - len(done.read_text().splitlines())  # the jobs still to run when the failover strikes
        struck = time.time()
        began = time.monotonic()
        if case.event == "kill":
            cluster.kill_primary(primary)
            cluster.wait_healthy(60)
            healthy = time.monotonic() - began
        else:
            cluster.failover(cluster.replica_of(primary))
            healthy = time.monotonic() - began
        pusher.join(120)
        assert not pusher.is_alive(), "the client's pushes did not go through"
        expected = {**pushed, **{jid: victim for jid in late if jid is not None}}
        try:
            wait_until(lambda: set(expected) <= set(jids_of(done)), 90, message="every job to run")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {whereabouts(r, set(expected) - set(jids_of(done)), late)}") from None
        wait_until(lambda: all(r.llen(keys.queue(queue)) == 0 for queue in queues), 30, message="empty queues")
        assert worker.running, worker.output()  # followed the new primary: the same worker, still running
        output = worker.output()
        assert worker.stop() == 0, output
    runs = runs_of(done)
    finished = [jid for jid, _ in runs]
    lost = len(set(expected) - set(finished))
    duplicated = len(finished) - len(set(finished))
    resumed = resumed_after([started for jid, started in runs if expected.get(jid) == victim], struck, healthy)
    print(
        f"\n{case.server} slots={case.slots} {case.event}: {len(expected)} jobs, {lost} lost, {duplicated} ran twice, "
        f"cluster healthy after {healthy:.1f} s, jobs of the failed primary ran again after {resumed:.1f} s; "
        f"{len(refused)} refused pushes retried"
    )
    assert backlog >= TOTAL // 2, f"only {backlog} jobs were left when the failover struck: not mid-drain"
    assert len(late) == LATE and None not in late
    assert lost == 0
    starts = [line for line in output.splitlines() if " starting: " in line]
    assert len(starts) == 1 and f" identity={worker.identity} " in starts[0], output  # never restarted
    assert set(re.findall(r" pid=(\d+) ", output)) == {str(worker.pid)}, output
    assert "Traceback" not in output, output
    outage = [line for line in output.splitlines() if "unreachable" in line or "retrying with backoff" in line]
    assert len(outage) <= 1, outage  # logged once, not per job or per thread
    if case.event == "kill":  # the fetches failed until the replica took over (a manual failover just redirects)
        assert len(outage) == 1, output
    if outage:
        assert "Redis works again" in output.split(outage[0], 1)[1], output


def chosen_queues(cluster: LoopbackCluster, r: redis.Redis, slots: str) -> tuple[list[str], str]:
    """The queues to drain and the one whose primary fails. In the "one" layout a single queue (every key is in one
    slot); in the queue layout 3 queues on 3 distinct primaries, the failing one not on the primary of kiq's shared
    slot (so that the outage is the queue's alone)."""
    keys = kiq.ext.keyspace(r)
    if slots == "one":
        return ["default"], "default"
    shared = owner(cluster, r, keys.key("processes"))
    by_primary: dict[str, str] = {}
    for index in range(1000):
        name = f"q{index}"
        by_primary.setdefault(owner(cluster, r, keys.queue(name)).id, name)
        if len(by_primary) == QUEUE_COUNT:
            break
    (victim,) = [name for node_id, name in by_primary.items() if node_id != shared.id][:1]
    return sorted(by_primary.values()), victim


def owner(cluster: LoopbackCluster, r: redis.Redis, key: str) -> Node:
    """The primary that serves ``key``'s slot, as the cluster says."""
    slot = key_slot(key.encode())
    for primary in cluster.primaries():
        for item in cluster.view(primary)[primary.id][2].split():
            first, _, last = item.partition("-")
            if not item.startswith("[") and int(first) <= slot <= int(last or first):
                return primary
    raise AssertionError(f"no primary serves slot {slot} of {key!r}")


def whereabouts(r: redis.Redis, missing: set[str], late: list[str | None]) -> str:
    """Where the jobs that did not run are: in which list of the cluster (a queue, a working list), or nowhere."""
    found: dict[str, list[str]] = {jid: [] for jid in missing}
    for key in r.scan_iter(_type="list"):
        for job in r.lrange(key, 0, -1):
            for jid in missing:
                if jid in job:
                    found[jid].append(str(key))
    return "; ".join(
        f"{jid} ({'pushed one by one' if jid in late else 'pushed in bulk'}) is in {lists or 'no list'}"
        for jid, lists in found.items()
    )


def runs_of(done: Path) -> list[tuple[str, float]]:
    """Each run in the file: (jid, when it started)."""
    runs = []
    for line in done.read_text().splitlines():
        jid, started = line.split()
        runs.append((jid, float(started)))
    return runs


def jids_of(done: Path) -> list[str]:
    return [jid for jid, _ in runs_of(done)]


def resumed_after(starts: list[float], struck: float, healthy: float) -> float:
    """Seconds from ``struck`` until jobs ran again: the end of the longest pause between two job starts that ends
    after it and begins before the cluster was healthy again, ``healthy`` seconds later (jobs running when it struck
    finish after it: their ends would not show the pause; the pauses of the drain's end are left out)."""
    ordered = sorted(starts)
    pauses = [
        (later - earlier, later)
        for earlier, later in itertools.pairwise(ordered)
        if later > struck and earlier <= struck + healthy
    ]
    if not pauses:
        return 0.0
    return max(0.0, max(pauses)[1] - struck)
