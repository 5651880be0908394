"""ReliableFetch against a real Redis: jobs move into the working list, leave it on acknowledge or requeue, and
a graceful stop leaves nothing behind."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import kiq
import kiq.ext
from kiq.fetcher import TIMEOUT, Capsule
from kiq.payload import dumps
from kiq.pipeline import follow_new_master
from kiq.plugins.reliable_fetch import ReliableFetch, ReliableUnit
from kiq.plugins.reliable_fetch.fetch import BLOCK_SECONDS
from kiq.server.fetch import fetcher_for
from tests.jobs.reliable import DONE, HOLD, Hold
from tests.support import InProcessWorker, connection_ids, short_block, wait_until

IDENTITY = "host:1:aaaaaaaaaaaa"
WORKING = f"kiq:working:{IDENTITY}:default"
ALIVE = f"kiq:alive:{IDENTITY}"

MakeFetch = Callable[..., ReliableFetch]


@pytest.fixture
def make_fetch(config: kiq.Config) -> Iterator[MakeFetch]:
    """``make_fetch(queues=[("default", 0)], name="default", identity=IDENTITY)``; stopped at teardown."""
    made: list[ReliableFetch] = []
    config.fetch = "reliable"

    def make(
        queues: list[tuple[str, int]] | None = None, name: str = "default", identity: str = IDENTITY
    ) -> ReliableFetch:
        fetch = fetcher_for(Capsule(name, queues or [("default", 0)], 5, config, identity))  # as the worker does
        assert isinstance(fetch, ReliableFetch)
        made.append(fetch)
        return fetch

    yield make
    for fetch in made:
        fetch.close()


def push(r: redis.Redis, queue: str, count: int) -> list[str]:
    """Push ``count`` jobs the way the client does (LPUSH); returns them oldest first."""
    jobs = [dumps({"class": "Noop", "args": [i], "jid": f"{queue}-{i}", "queue": queue}) for i in range(count)]
    for job in jobs:
        r.lpush(f"queue:{queue}", job)
    return jobs


def take(fetch: ReliableFetch) -> ReliableUnit:
    unit = fetch.retrieve_work()
    assert unit is not None
    return unit


def test_fetch_moves_the_job_into_the_working_list(make_fetch: MakeFetch, r: redis.Redis) -> None:
    jobs = push(r, "default", 3)
    unit = take(make_fetch())
    assert (unit.queue_name, unit.job) == ("default", jobs[0])  # FIFO, like BRPOP
    assert r.lrange(WORKING, 0, -1) == [jobs[0]]  # one thread waiting: one job moved, none hoarded
    assert r.lrange("queue:default", 0, -1) == [jobs[2], jobs[1]]


def test_an_acknowledgement_rides_on_the_next_fetch(make_fetch: MakeFetch, r: redis.Redis) -> None:
    jobs = push(r, "default", 2)
    fetch = make_fetch()
    first = take(fetch)
    first.acknowledge()
    second = take(fetch)  # the ack rides along with this fetch
    assert second.job == jobs[1]
    assert r.lrange(WORKING, 0, -1) == [jobs[1]]
    fetch.flush_acks()
    second.acknowledge()
    fetch.flush_acks()
    assert not r.exists(WORKING)


@pytest.mark.parametrize(
    ("listed", "count", "newest", "left", "cut"),
    [
        (["j5", "j4", "j3", "j2", "j1"], 2, "j2", ["j5", "j4", "j3"], 2),  # the two oldest: one LTRIM
        (["j3", "j2", "j1"], 3, "j3", [], 3),  # all of them
        (["j3", "j2", "j1"], 0, "", ["j3", "j2", "j1"], 0),  # nothing finished
        (["j3", "j2", "j1"], 2, "j1", ["j3", "j2", "j1"], -1),  # not the list the ledger knows: nothing is cut
        (["j1"], 2, "j1", ["j1"], -1),  # shorter than the ledger says (recovered meanwhile): nothing is cut
    ],
)
def test_the_fetch_script_trims_the_finished_oldest_jobs_by_count_only_from_the_list_the_ledger_knows(
    r: redis.Redis, listed: list[str], count: int, newest: str, left: list[str], cut: int
) -> None:
    """The fetch script cuts the finished oldest jobs by count, after checking only the newest of them: never a job
    of a list that is not the one the fetcher's ledger knows (a -1 then makes it compare strings)."""
    from kiq.plugins.reliable_fetch import scripts

    r.rpush(WORKING, *listed)  # newest first, as the fetch's LPUSH leaves them
    keys = scripts.FETCH.keys(kiq.ext.keyspace(r), WORKING, ["default"])
    assert keys == [WORKING, "queue:default"]  # standalone: Sidekiq's names
    fetched = r.eval(scripts.FETCH.source, len(keys), *keys, 1, count, newest)
    assert fetched == [cut]  # the queue is empty
    assert r.lrange(WORKING, 0, -1) == left


def test_the_fetch_script_trims_after_it_pushed(r: redis.Redis) -> None:
    """The trim comes last: a trim that empties the working list cannot come before the push (on a cluster, a push
    into a missing key of a slot being migrated is refused after the pop: issue 42)."""
    from kiq.plugins.reliable_fetch import scripts

    r.rpush(WORKING, "j1")
    r.lpush("queue:default", "j2")
    keys = scripts.FETCH.keys(kiq.ext.keyspace(r), WORKING, ["default"])
    database = r.connection_pool.connection_kwargs.get("db", 0)  # MONITOR sees the other test processes' too
    monitor = r.monitor()
    with monitor:
        r.eval(scripts.FETCH.source, len(keys), *keys, 5, 1, "j1")
        commands = []
        while not commands or commands[-1] != "ltrim":
            seen = monitor.next_command()
            command = seen["command"].split()[0].lower()
            if seen["db"] == database and command in ("rpop", "lpush", "ltrim"):
                commands.append(command)
    assert commands == ["rpop", "lpush", "ltrim"]
    assert r.lrange(WORKING, 0, -1) == ["j2"]


def test_a_fetch_refreshes_the_liveness_key_once_per_tenth_of_its_ttl(make_fetch: MakeFetch, r: redis.Redis) -> None:
    """Not a PEXPIRE per fetch, but the key is back before a job enters the list once a tenth of its TTL passed."""
    push(r, "default", 3)
    fetch = make_fetch()
    r.delete(ALIVE)  # as if it had expired
    take(fetch)
    assert not r.exists(ALIVE)  # refreshed when the fetcher started: not yet due
    fetch.liveness._refreshed -= fetch.liveness.ttl_ms / 10_000  # a tenth of the TTL later
    take(fetch)
    assert 0 < r.pttl(ALIVE) <= fetch.liveness.ttl_ms


def test_an_acknowledgement_no_fetch_carries_is_sent_by_itself(make_fetch: MakeFetch, r: redis.Redis) -> None:
    """Every thread busy (or the fetch blocked on an empty queue): no fetch is coming, the ack goes out alone."""
    jobs = push(r, "default", 2)
    fetch = make_fetch()
    first, second = take(fetch), take(fetch)  # two threads on their jobs; nobody asks for work
    first.acknowledge()
    wait_until(lambda: r.lrange(WORKING, 0, -1) == [jobs[1]], 10, message="the acknowledgement in Redis")
    second.acknowledge()
    wait_until(lambda: not r.exists(WORKING), 10, message="the second acknowledgement in Redis")


def test_after_quiet_acknowledge_is_sent_at_once(make_fetch: MakeFetch, r: redis.Redis) -> None:
    push(r, "default", 1)
    fetch = make_fetch()
    unit = take(fetch)
    fetch.quiet()
    unit.acknowledge()
    assert not r.exists(WORKING)


def test_heartbeat_sends_pending_acks_and_refreshes_liveness(
    make_fetch: MakeFetch, config: kiq.Config, r: redis.Redis
) -> None:
    push(r, "default", 1)
    fetch = make_fetch()
    take(fetch).acknowledge()
    r.pexpire(ALIVE, 50)
    fetch.heartbeat()
    assert not r.exists(WORKING)
    assert r.pttl(ALIVE) > 1000


def test_requeue_puts_the_job_back_where_it_runs_next(make_fetch: MakeFetch, r: redis.Redis) -> None:
    jobs = push(r, "default", 2)
    fetch = make_fetch()
    unit = take(fetch)
    unit.requeue()
    assert r.lindex("queue:default", -1) == jobs[0]
    assert not r.exists(WORKING)
    unit.requeue()  # no longer ours: not pushed a second time
    assert r.llen("queue:default") == 2


def test_a_requeue_after_acknowledge_does_not_run_the_job_again(make_fetch: MakeFetch, r: redis.Redis) -> None:
    push(r, "default", 1)
    fetch = make_fetch()
    unit = take(fetch)
    fetch.quiet()
    unit.acknowledge()
    unit.requeue()
    assert not r.exists("queue:default")


def test_strict_order_drains_queues_in_the_given_order(make_fetch: MakeFetch, r: redis.Redis) -> None:
    low = push(r, "low", 1)
    high = push(r, "high", 1)
    fetch = make_fetch([("high", 0), ("low", 0)])
    assert [take(fetch).job for _ in range(2)] == [high[0], low[0]]


def test_weighted_order_follows_the_weights(make_fetch: MakeFetch, r: redis.Redis) -> None:
    push(r, "often", 300)
    push(r, "rarely", 300)
    fetch = make_fetch([("often", 3), ("rarely", 1)])
    queues = [take(fetch).queue_name for _ in range(200)]
    share = queues.count("often") / len(queues)
    assert 0.6 < share < 0.9, share  # expected 0.75


def test_random_order_takes_from_every_queue(make_fetch: MakeFetch, r: redis.Redis) -> None:
    push(r, "a", 50)
    push(r, "b", 50)
    fetch = make_fetch([("a", 1), ("b", 1)])
    assert {take(fetch).queue_name for _ in range(40)} == {"a", "b"}


@pytest.mark.parametrize("queues", [[("default", 0)], [("a", 0), ("b", 0)]], ids=["one-queue", "two-queues"])
def test_retrieve_work_returns_none_promptly_when_queues_are_empty(
    make_fetch: MakeFetch, queues: list[tuple[str, int]]
) -> None:
    fetch = make_fetch(queues)
    assert fetch.block_seconds == BLOCK_SECONDS <= TIMEOUT  # the default is within the seam's bound, 2 s
    short_block(fetch, 0.4)  # blocking in BLMOVE (one queue) or backing off in sleeps (two), as with the default
    started = time.monotonic()
    assert fetch.retrieve_work() is None
    # within the fetcher's block time: 2.5 times it, as 2.5 s were for the default 1 s, so a stop is prompt
    assert time.monotonic() - started < 2.5 * fetch.block_seconds


def test_a_job_pushed_while_blocking_is_fetched(make_fetch: MakeFetch, r: redis.Redis) -> None:
    fetch = make_fetch()
    got: list[ReliableUnit | None] = []
    thread = threading.Thread(target=lambda: got.append(fetch.retrieve_work()))
    thread.start()
    # let it block in BLMOVE (or be on its way there); the assertion below does not depend on it
    wait_until(lambda: fetch._leading, 5, message="the fetch to start")
    jobs = push(r, "default", 1)
    thread.join(5)
    unit = got[0] or take(fetch)
    assert unit.job == jobs[0]
    assert r.lrange(WORKING, 0, -1) == [jobs[0]]


def _append_work(fetch: ReliableFetch, got: list[ReliableUnit | None]) -> None:
    got.append(fetch.retrieve_work())


def test_a_job_pushed_to_any_of_several_empty_queues_wakes_the_fetch_at_once(
    make_fetch: MakeFetch, r: redis.Redis
) -> None:
    """Several queues, all empty for a while: the fetch blocks on every one of them (it slept 50 ms doubling to
    500 ms before, issue 43), so a job pushed to any, the last in the order too, is taken at once; each queue's jobs
    wait in a working list of their own (the order of each is known to the ledger)."""
    fetch = make_fetch([("critical", 0), ("default", 0), ("low", 0)])
    fetch.block_seconds = 5.0
    waits = []
    for queue in ("low", "critical", "default", "low"):
        assert short_block(fetch, 0.6).retrieve_work() is None  # idle past the old backoff's longest sleep
        fetch.block_seconds = 5.0
        got: list[ReliableUnit | None] = []
        thread = threading.Thread(target=_append_work, args=(fetch, got))
        thread.start()
        time.sleep(0.3)  # blocking by now
        started = time.monotonic()
        [job] = push(r, queue, 1)
        thread.join(5)
        waits.append(time.monotonic() - started)
        assert got and got[0] is not None and got[0].job == job
        assert r.lrange(f"{WORKING}~{queue}", 0, -1) == [job]
        got[0].acknowledge()
    # the old backoff's waits were up to 500 ms each; generous for a loaded machine, far below that
    assert sorted(waits)[len(waits) // 2] < 0.15, waits


def test_after_the_worker_follows_a_new_master_its_moves_park_on_new_connections(
    make_fetch: MakeFetch, r: redis.Redis, config: kiq.Config
) -> None:
    """A worker on Sentinel with ``push_replicas`` moves to a new master as soon as the Sentinels name it
    (``follow_new_master``). A parked move's connection is kept from wait to wait, and redis-py keeps it on the
    old master's address: it would go on taking jobs from the old master, which the new one still holds and runs
    again (tests/test_sentinel.py measures that). The next fetch parks on new connections, and compares its
    working lists first (the new master's are as the promotion left them). One server plays both masters here."""
    fetch = make_fetch([("critical", 0), ("default", 0)])  # a move parked on each queue
    parked: list[set[int]] = []
    for _ in range(2):
        fetch.block_seconds = 5.0
        got: list[ReliableUnit | None] = []
        thread = threading.Thread(target=_append_work, args=(fetch, got))
        thread.start()
        wait_until(lambda: len(connection_ids(r, ("blmove",))) == 2, 5, message="a move parked on each queue")
        parked.append(connection_ids(r, ("blmove",)))
        [job] = push(r, "default", 1)
        thread.join(5)
        assert got and got[0] is not None and got[0].job == job
        got[0].acknowledge()
        follow_new_master(config.redis)
    assert parked[0].isdisjoint(parked[1])  # new connections, and the old ones closed:
    assert parked[0].isdisjoint(int(entry["id"]) for entry in r.client_list())
    assert not fetch.ledger.unsure  # compared with its lists before it parked again


def test_concurrent_threads_get_distinct_jobs_and_nothing_is_hoarded(make_fetch: MakeFetch, r: redis.Redis) -> None:
    push(r, "default", 50)
    fetch = make_fetch()
    units: list[ReliableUnit] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(5):
            unit = take(fetch)
            with lock:
                units.append(unit)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len({unit.job for unit in units}) == 20
    # every job that left the queue was handed to a thread: the buffer is empty once no thread waits
    assert sorted(r.lrange(WORKING, 0, -1)) == sorted(unit.job for unit in units)
    assert r.llen("queue:default") == 30


def test_bulk_requeue_returns_in_flight_jobs_and_leaves_nothing_behind(make_fetch: MakeFetch, r: redis.Redis) -> None:
    jobs = push(r, "default", 3)
    fetch = make_fetch()
    units = [take(fetch), take(fetch)]
    assert r.exists(ALIVE)
    fetch.bulk_requeue(units)  # a stop ran out of time: the in-flight jobs go back, the fetcher stays open
    assert r.lrange("queue:default", 0, -1) == [jobs[2], jobs[1], jobs[0]]  # the first fetched runs first again
    assert not r.exists(WORKING)
    assert r.exists(ALIVE)
    fetch.close()  # the stop's end
    assert not r.exists(ALIVE)
    assert fetch.retrieve_work() is None  # stopped


def test_bulk_requeue_returns_jobs_no_thread_reported(make_fetch: MakeFetch, r: redis.Redis) -> None:
    """A job in the working list that the manager did not pass (e.g. a reply lost on the network) runs again."""
    stray = dumps({"class": "Noop", "args": [], "jid": "stray", "queue": "other"})
    fetch = make_fetch()
    r.lpush(WORKING, stray)
    fetch.close()
    assert r.lrange("queue:other", 0, -1) == [stray]
    assert not r.exists(WORKING)


def test_a_stop_without_redis_leaves_the_jobs_for_recovery(make_fetch: MakeFetch, r: redis.Redis) -> None:
    jobs = push(r, "default", 1)
    fetch = make_fetch()
    unit = take(fetch)
    # nothing listens there; no retries (redis-py's default, 10 with a backoff from 10 ms to 1 s, takes ~2.5-4 s
    # per command, here and in the teardown's close)
    fetch.redis = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    fetch.bulk_requeue([unit])  # logs, does not raise: the jobs are still safe in Redis
    assert r.lrange(WORKING, 0, -1) == jobs
    assert r.exists(ALIVE)  # it expires, and then another process recovers the list


def test_liveness_key_stays_while_another_capsule_of_the_process_runs(make_fetch: MakeFetch, r: redis.Redis) -> None:
    default, serial = make_fetch(name="default"), make_fetch(name="serial")
    default.close()
    assert r.exists(ALIVE)
    serial.close()
    assert not r.exists(ALIVE)


def test_liveness_ttl_is_three_heartbeats(make_fetch: MakeFetch, config: kiq.Config, r: redis.Redis) -> None:
    config.heartbeat_interval = 2
    make_fetch()
    assert 5000 < r.pttl(ALIVE) <= 6000


# -- choosing the fetcher by setting ------------------------------------------------------------------
def test_fetch_setting_reliable_builds_the_reliable_fetcher(config: kiq.Config) -> None:
    config.fetch = "reliable"
    fetch = fetcher_for(Capsule("default", [("default", 0)], 2, config, IDENTITY))
    try:
        assert isinstance(fetch, ReliableFetch)
        assert config.get("reliable_max_interrupts") == 3
    finally:
        fetch.close()


def test_fetch_setting_from_env_and_config_file(tmp_path: Path, redis_url: str) -> None:
    from_env = kiq.Config.load(env={"KIQ_FETCH": "reliable", "KIQ_REDIS_URL": redis_url})
    config_file = tmp_path / "kiq.toml"
    config_file.write_text(f'fetch = "reliable"\nredis_url = "{redis_url}"\n')
    from_file = kiq.Config.load(config_file, env={})
    for config in (from_env, from_file):
        fetch = fetcher_for(Capsule("default", [("default", 0)], 2, config, IDENTITY))
        try:
            assert isinstance(fetch, ReliableFetch)
        finally:
            fetch.close()
            config.redis.close()


def test_plugin_settings_are_validated(config: kiq.Config) -> None:
    config.add_plugin("reliable_fetch")
    with pytest.raises(kiq.ConfigError, match="reliable_max_interrupts"):
        config.reliable_max_interrupts = 0
    config.reliable_batch_size = "4"
    assert config.get("reliable_batch_size") == 4


def test_fetched_payload_is_untouched(make_fetch: MakeFetch, r: redis.Redis) -> None:
    """Lua moves the exact string: empty lists stay lists and float timestamps keep every digit."""
    job = dumps({"class": "Noop", "args": [], "jid": "x", "queue": "default", "enqueued_at": 1718000000.123456})
    r.lpush("queue:default", job)
    assert take(make_fetch()).job == job


# -- end to end: one setting switches a real worker to the reliable fetcher ----------------------------
@pytest.mark.parametrize("how", ["cli", "env", "config-file"])
def test_a_worker_uses_the_reliable_fetcher_when_told_by(
    how: str, e2e_config: kiq.Config, start_worker: Callable[..., InProcessWorker], tmp_path: Path
) -> None:
    r = e2e_config.redis
    args = ["-r", "tests.jobs.reliable", "-q", "default", "-c", "2"]
    env = {"KIQ_HEARTBEAT_INTERVAL": "1"}
    if how == "cli":
        args += ["--fetch", "reliable"]
    elif how == "env":
        env["KIQ_FETCH"] = "reliable"
    else:  # `kiq worker -C FILE`: the CLI's parser reads the flag, Config.load the file
        (tmp_path / "worker.toml").write_text('fetch = "reliable"\n')
        args += ["-C", str(tmp_path / "worker.toml")]
    r.set(HOLD, "1")
    jid = Hold.perform_async()
    worker = start_worker(*args, env=env)

    def held_in_a_working_list() -> bool:
        return any(jid in item for key in r.scan_iter(match="kiq:working:*") for item in r.lrange(key, 0, -1))

    wait_until(held_in_a_working_list, 30, message=f"the job in a working list\n{worker.output()}")
    assert list(r.scan_iter(match="kiq:alive:*"))
    r.delete(HOLD)
    wait_until(lambda: r.sismember(DONE, jid), 30, message=f"the job to finish\n{worker.output()}")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    # acknowledged, and the stop removed the list and the liveness key (only the recovery lease runs out by itself)
    assert list(r.scan_iter(match="kiq:*")) == ["kiq:reliable:recovery-lease"]
