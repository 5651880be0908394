"""Reliable fetch on the real clusters (the ``cluster`` mark's 4 targets: Redis 7 and Valkey 9, both layouts): fetch,
acknowledge and requeue over three queues (on three primaries in the queue layout) in strict and weighted orders,
a worker killed -9 mid-drain whose jobs another recovers, and the path past the interrupt cap to the dead set (which
crosses slots in the queue layout)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from redis.cluster import RedisCluster

import kiq
import kiq.ext
from kiq.fetcher import Capsule
from kiq.payload import dumps, loads
from kiq.plugins.reliable_fetch import ReliableFetch, ReliableUnit, recover_orphans
from kiq.plugins.reliable_fetch.keys import JobList, alive_key, recovering_key, working_key
from kiq.server.fetch import fetcher_for
from tests.jobs.reliable import DONE, INTERRUPTED, RUNS, Tick
from tests.support import InProcessWorker, WorkerProcess, wait_until

IDENTITY = "host:1:aaaaaaaaaaaa"
GHOST = "ghost:2:bbbbbbbbbbbb"  # the owner of planted orphan lists: no such process is alive
ME = "me:3:cccccccccccc"  # the recovering process of the recovery tests

pytestmark = pytest.mark.cluster(only=True)

MakeFetch = Callable[..., ReliableFetch]
StartWorker = Callable[..., WorkerProcess]
StartInProcess = Callable[..., InProcessWorker]


@pytest.fixture
def cluster(config: kiq.Config) -> kiq.Config:
    """``config`` (on a cluster target) with reliable fetch."""
    config.fetch = "reliable"
    return config


@pytest.fixture
def make_fetch(cluster: kiq.Config) -> Iterator[MakeFetch]:
    made: list[ReliableFetch] = []

    def make(queues: list[tuple[str, int]], identity: str = IDENTITY) -> ReliableFetch:
        fetch = fetcher_for(Capsule("default", queues, 5, cluster, identity))
        assert isinstance(fetch, ReliableFetch)
        fetch.block_seconds = 0.3
        made.append(fetch)
        return fetch

    yield make
    for fetch in made:
        fetch.close()


def spread_queues(config: kiq.Config, count: int = 3) -> list[str]:
    """``count`` queue names whose lists are on different primaries in the queue layout (in the one layout every
    key is in one slot anyway)."""
    client: RedisCluster = config.redis
    keys = kiq.ext.keyspace(client)
    names: list[str] = []
    nodes: set[str] = set()
    for index in range(1000):
        name = f"q{index}"
        node = client.get_node_from_key(kiq.ext.Keyspace("queue").queue(name)).name
        if node not in nodes:
            nodes.add(node)
            names.append(name)
        if len(names) == count:
            break
    assert len(names) == count, f"fewer than {count} primaries: {nodes}"
    assert len({client.keyslot(keys.queue(name)) for name in names}) == (count if config.slots == "queue" else 1)
    return names


def push(config: kiq.Config, queue: str, count: int) -> list[str]:
    """Push ``count`` jobs as the client does (LPUSH); returns them oldest first."""
    jobs = [dumps({"class": "Noop", "args": [i], "jid": f"{queue}-{i}", "queue": queue}) for i in range(count)]
    config.redis.lpush(kiq.ext.keyspace(config.redis).queue(queue), *jobs)
    return jobs


def take(fetch: ReliableFetch) -> ReliableUnit:
    unit = fetch.retrieve_work()
    assert unit is not None
    return unit


def working(config: kiq.Config, queue: str, identity: str = IDENTITY) -> list[str]:
    """The working list the jobs of ``queue`` wait in (one per queue in the queue layout), newest first."""
    keys = kiq.ext.keyspace(config.redis)
    key = JobList.beside(keys, working_key(identity, "default"), queue).key(keys)
    return list(config.redis.lrange(key, 0, -1))


def all_lists(config: kiq.Config) -> list[str]:
    """Every working and recovering list on every primary."""
    found = []
    for pattern in ("*kiq:working:*", "*kiq:recovering:*"):
        found += list(config.redis.scan_iter(match=pattern, _type="list"))
    return found


def test_strict_order_fetch_ack_and_requeue_over_three_queues(cluster: kiq.Config, make_fetch: MakeFetch) -> None:
    high, mid, low = spread_queues(cluster)
    jobs = {name: push(cluster, name, 2) for name in (high, mid, low)}
    fetch = make_fetch([(high, 0), (mid, 0), (low, 0)])
    units = [take(fetch) for _ in range(6)]
    assert [(unit.queue_name, unit.job) for unit in units] == [
        (name, job) for name in (high, mid, low) for job in jobs[name]
    ]  # strict: a queue is drained before the next, across slots
    for name in (high, mid, low):  # each job waits in its queue's working list (one list in the one layout)
        listed = working(cluster, name)
        assert set(jobs[name]) <= set(listed)
    units[0].acknowledge()
    units[2].acknowledge()
    units[5].requeue()
    fetch.flush_acks()
    assert jobs[high][0] not in working(cluster, high) and jobs[mid][0] not in working(cluster, mid)
    assert cluster.redis.lrange(kiq.ext.keyspace(cluster.redis).queue(low), 0, -1) == [jobs[low][1]]
    again = take(fetch)  # the requeued job runs next
    assert (again.queue_name, again.job) == (low, jobs[low][1])
    for unit in (units[1], units[3], units[4], again):
        unit.acknowledge()
    fetch.flush_acks()
    assert all_lists(cluster) == []
    assert fetch.retrieve_work() is None


def test_weighted_order_over_three_queues_follows_the_weights(cluster: kiq.Config, make_fetch: MakeFetch) -> None:
    often, sometimes, rarely = spread_queues(cluster)
    for name in (often, sometimes, rarely):
        push(cluster, name, 200)
    fetch = make_fetch([(often, 4), (sometimes, 2), (rarely, 1)])
    units = [take(fetch) for _ in range(280)]
    share = {name: sum(unit.queue_name == name for unit in units) / len(units) for name in (often, sometimes)}
    # Sidekiq's weighted order: a queue comes first in weight/total of the fetches (4/7, 2/7, 1/7 expected); a
    # batch takes from one slot at a time, so the shares hold per fetch as well as per job
    assert 0.4 < share[often] < 0.75, share
    assert 0.15 < share[sometimes] < 0.42, share
    assert any(unit.queue_name == rarely for unit in units)
    listed = sum(len(working(cluster, name)) for name in (often, sometimes, rarely))
    assert listed == (280 if cluster.slots == "queue" else 3 * 280)  # one shared list in the one layout: read 3 times
    fetch.bulk_requeue(units)  # a stop ran out of time: every one goes back to the fetch end of its queue
    assert all_lists(cluster) == []
    keys = kiq.ext.keyspace(cluster.redis)
    assert sum(cluster.redis.llen(keys.queue(name)) for name in (often, sometimes, rarely)) == 600


def test_a_job_pushed_while_blocking_on_one_queue_is_fetched(cluster: kiq.Config, make_fetch: MakeFetch) -> None:
    (name,) = spread_queues(cluster, 1)
    fetch = make_fetch([(name, 0)])
    assert fetch.retrieve_work() is None  # BLMOVE from the queue into its working list, in one slot
    job = push(cluster, name, 1)[0]
    unit = take(fetch)
    assert unit.job == job and working(cluster, name) == [job]


def test_a_stop_gives_every_queue_its_jobs_back(cluster: kiq.Config, make_fetch: MakeFetch) -> None:
    names = spread_queues(cluster)
    for name in names:
        push(cluster, name, 1)
    fetch = make_fetch([(name, 0) for name in names])
    [take(fetch) for _ in names]
    keys = kiq.ext.keyspace(cluster.redis)
    assert cluster.redis.exists(keys.key(alive_key(IDENTITY)))
    fetch.close()
    assert all_lists(cluster) == []
    assert [cluster.redis.llen(keys.queue(name)) for name in names] == [1, 1, 1]
    assert not cluster.redis.exists(keys.key(alive_key(IDENTITY)))


def plant_orphan(config: kiq.Config, queue: str, jobs: list[str], name: str | None = None) -> str:
    """A list of ``jobs`` as a dead process (GHOST) left it beside ``queue``; returns its key."""
    keys = kiq.ext.keyspace(config.redis)
    key = JobList.beside(keys, name or working_key(GHOST, "default"), queue).key(keys)
    config.redis.lpush(key, *jobs)
    return key


@pytest.fixture
def recovering(cluster: kiq.Config) -> kiq.Config:
    cluster.redis.set(kiq.ext.keyspace(cluster.redis).key(alive_key(ME)), "1", px=10_000)
    return cluster


def test_orphans_on_every_primary_go_back_to_their_queues(recovering: kiq.Config) -> None:
    names = spread_queues(recovering)
    orphans = {name: push(recovering, name, 2) for name in names}
    keys = kiq.ext.keyspace(recovering.redis)
    for name in names:  # what a killed fetcher leaves: its jobs out of the queue, in its working list
        recovering.redis.delete(keys.queue(name))
        plant_orphan(recovering, name, orphans[name])  # oldest first, as the fetch pushes them
    live = plant_orphan(recovering, names[0], ["running"], working_key(IDENTITY, "default"))
    recovering.redis.set(keys.key(alive_key(IDENTITY)), "1", px=10_000)
    report = recover_orphans(recovering, ME)
    assert report is not None and report.requeued == 6 and report.dead == 0
    for name in names:  # SCAN found the lists on each primary; each job is back at the back of its own queue
        back = [loads(job) for job in reversed(recovering.redis.lrange(keys.queue(name), 0, -1))]
        assert [job["jid"] for job in back] == [loads(job)["jid"] for job in orphans[name]]
        assert all(job["interrupted_count"] == 1 for job in back)
    assert recovering.redis.lrange(live, 0, -1) == ["running"]  # its owner is alive: not touched
    assert all_lists(recovering) == [live]


def test_a_job_past_the_interrupt_cap_goes_to_the_dead_set(recovering: kiq.Config) -> None:
    """In the queue layout the dead set (kiq's shared slot) and the list (the queue's) are two slots: the job is
    added to the dead set first and leaves the list after, so a crash in between leaves it listed, and the next
    recovery kills it again: a duplicate in the dead set at worst, never a loss."""
    queue = spread_queues(recovering, 2)[1]
    keys = kiq.ext.keyspace(recovering.redis)
    poison = dumps({"class": "Noop", "args": [], "jid": "poison", "queue": queue, "interrupted_count": 2})
    healthy = dumps({"class": "Noop", "args": [], "jid": "healthy", "queue": queue})
    plant_orphan(recovering, queue, [poison, healthy])
    report = recover_orphans(recovering, ME)
    assert report is not None and (report.requeued, report.dead) == (1, 1)
    dead = [loads(job) for job in recovering.redis.zrange(keys.key("dead"), 0, -1)]
    assert [(job["jid"], job["interrupted_count"]) for job in dead] == [("poison", 3)]
    assert dead[0]["error_class"].endswith("InterruptedJobError")
    assert [loads(job)["jid"] for job in recovering.redis.lrange(keys.queue(queue), 0, -1)] == ["healthy"]
    assert all_lists(recovering) == []

    # the state a recoverer killed between the two commands leaves: the job dead and still in its claim list
    recovering.redis.zadd(keys.key("dead"), {poison: time.time()})  # reliable_max_interrupts: 3 by default
    plant_orphan(recovering, queue, [poison], recovering_key(GHOST))
    recovering.redis.delete(keys.key("kiq:reliable:recovery-lease"))
    report = recover_orphans(recovering, ME)
    assert report is not None and (report.requeued, report.dead) == (0, 1)
    jids = [loads(job)["jid"] for job in recovering.redis.zrange(keys.key("dead"), 0, -1)]
    assert set(jids) == {"poison"} and len(jids) == 3  # killed again: duplicates in the dead set, nothing lost
    assert all_lists(recovering) == []
    assert [loads(job)["jid"] for job in recovering.redis.lrange(keys.queue(queue), 0, -1)] == ["healthy"]


def test_a_worker_killed_mid_drain_loses_no_job(
    e2e_config: kiq.Config, start_worker_process: StartWorker, start_worker: StartInProcess
) -> None:
    """A real worker on the cluster, SIGKILLed while it runs jobs of three queues; another (never killed: in this
    process) recovers them."""
    names = spread_queues(e2e_config)
    r = e2e_config.redis
    total = 150
    for index in range(total):
        Tick.set(queue=names[index % 3]).perform_async(40)
    env = {
        "KIQ_HEARTBEAT_INTERVAL": "1",
        "KIQ_PLUGINS": "reliable_fetch",
        "KIQ_RELIABLE_RECOVERY_INTERVAL": "1",
        "KIQ_RELIABLE_MAX_INTERRUPTS": "1000",
    }
    queues = (arg for name in names for arg in ("-q", name))
    args = ["-r", "tests.jobs.reliable", *queues, "-c", "4", "--fetch", "reliable"]
    first = start_worker_process(*args, env=env)
    wait_until(lambda: r.scard(DONE) >= 20, 60, message="the first worker to run jobs")
    # jobs in its working lists now, not a heartbeat's count of up to a second ago: the kill finds some in flight
    wait_until(lambda: any(r.llen(key) for key in all_lists(e2e_config)), 30, message="jobs in its working lists")
    first.kill()
    assert r.scard(DONE) < total  # killed mid-drain
    second = start_worker(*args, env=env)
    wait_until(lambda: r.scard(DONE) == total, 120, interval=0.5, message=f"all jobs ({r.scard(DONE)} done)")
    wait_until(lambda: all_lists(e2e_config) == [], 30, message="no list left")  # the killed one's recovered
    print(
        f"\ncluster ({e2e_config.slots}): {total} jobs, 1 SIGKILL, 0 lost, {r.scard(INTERRUPTED)} recovered, "
        f"{int(r.get(RUNS) or 0) - total} duplicate completions"
    )
    assert r.scard(INTERRUPTED) > 0  # the kill did catch jobs in flight, and they ran again
    assert r.zcard(kiq.ext.keyspace(r).key("dead")) == 0
    assert second.stop() == 0, second.output()


def evalsha_calls(config: kiq.Config) -> int:
    """Scripts run on the cluster's primaries since their stats were reset (each is one round trip of a fetch)."""
    stats = config.redis.info("commandstats", target_nodes=RedisCluster.PRIMARIES)
    return sum(int(node.get("cmdstat_evalsha", {}).get("calls", 0)) for node in stats.values())


def test_a_fetch_costs_one_round_trip_per_slot_it_tries(cluster: kiq.Config, make_fetch: MakeFetch) -> None:
    """The cost of a fetch in each layout (the bench's numbers): one script per slot group of the queue order, until
    one has jobs; one in all in the one layout (every queue in one slot). The liveness refresh, a round trip of its
    own, comes at most once per tenth of its TTL (3 s by default), not per fetch."""
    high, mid, low = spread_queues(cluster)
    fetch = make_fetch([(high, 0), (mid, 0), (low, 0)])
    push(cluster, high, 1)
    take(fetch).acknowledge()  # the scripts are loaded on every primary (the first EVALSHA met NOSCRIPT)
    fetch.flush_acks()
    for queue, queue_layout_trips in ((high, 1), (mid, 2), (low, 3)):
        push(cluster, queue, 1)
        cluster.redis.config_resetstat(target_nodes=RedisCluster.PRIMARIES)
        unit = take(fetch)
        assert unit.queue_name == queue
        assert evalsha_calls(cluster) == (queue_layout_trips if cluster.slots == "queue" else 1)
        unit.acknowledge()
    fetch.flush_acks()
    assert all_lists(cluster) == []
