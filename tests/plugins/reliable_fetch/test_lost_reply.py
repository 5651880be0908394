"""A reliable fetch whose reply is lost: Redis moved the jobs into the working list, the worker never heard of them.

A real redis-server, reached through a small TCP proxy of the test's own that forwards a command and then cuts the
connection instead of passing the reply on (what a Redis killed mid-call does to its client), and refuses new
connections while "down". The fetcher must put what it does not hold back into the queue once Redis answers.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import kiq
from kiq.fetcher import Capsule
from kiq.payload import dumps
from kiq.plugins.reliable_fetch import ReliableFetch, ReliableUnit
from kiq.server.fetch import fetcher_for
from tests.jobs.outcomes import DONE
from tests.outage_support import AofRedis, aof_redis
from tests.sentinel_support import free_port
from tests.support import FAST, InProcessWorker, wait_until

IDENTITY = "host:1:bbbbbbbbbbbb"
WORKING = f"kiq:working:{IDENTITY}:default"


class ReplyCutter:
    """A TCP proxy to Redis. ``cut_next_reply()``: the next reply from Redis (or the next one that contains
    ``marker``) is not passed on, the client's connection is closed instead; with ``down=True``, Redis is "gone"
    from then on: every open connection is cut too, and new ones are closed at once until ``up()``. ``cuts`` counts
    the replies cut."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.cuts = 0
        self._cut: bytes | None = None  # cut the next reply that contains this
        self._down = False
        self._down_after_cut = False
        self._open: set[socket.socket] = set()  # both ends of every pair being pumped
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_next_reply(self, down: bool = False, marker: bytes = b"") -> None:
        with self._lock:
            self._cut, self._down_after_cut = marker, down

    def up(self) -> None:
        with self._lock:
            self._cut, self._down = None, False

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                down = self._down
            if down:
                client.close()
                continue
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self._open |= {client, server}
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while data := source.recv(65536):
                if replies:
                    with self._lock:
                        cut = self._cut is not None and self._cut in data
                        if cut:
                            self._cut, self._down = None, self._down_after_cut
                            self.cuts += 1
                            victims = set(self._open) if self._down else {source, sink}
                    if cut:
                        _hang_up(victims)
                        break
                sink.sendall(data)
        except OSError:
            pass
        _hang_up({source, sink})
        with self._lock:
            self._open -= {source, sink}


def _hang_up(ends: set[socket.socket]) -> None:
    for end in ends:  # shutdown, not only close: it wakes the other pump's recv and sends the FIN
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
        end.close()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[AofRedis]:
    with aof_redis(tmp_path / "redis") as server:
        yield server


@pytest.fixture
def proxy(redis_server: AofRedis) -> Iterator[ReplyCutter]:
    cutter = ReplyCutter(redis_server.port)
    yield cutter
    cutter.close()


@pytest.fixture
def fetch(proxy: ReplyCutter) -> Iterator[ReliableFetch]:
    config = kiq.Config(redis_url=f"redis://127.0.0.1:{proxy.port}/0", fetch="reliable")
    fetcher = fetcher_for(Capsule("default", [("default", 0)], 5, config, IDENTITY))
    assert isinstance(fetcher, ReliableFetch)
    fetcher.block_seconds = 0.2
    yield fetcher
    proxy.up()
    fetcher.close()
    config.redis.close()


@pytest.fixture
def r(redis_server: AofRedis) -> Iterator[redis.Redis]:
    client = redis.Redis(port=redis_server.port, decode_responses=True)
    yield client
    client.close()


def job(name: str) -> str:
    return dumps({"class": "Noop", "args": [], "jid": name, "queue": "default"})


def take(fetch: ReliableFetch) -> ReliableUnit:
    unit = fetch.retrieve_work()
    assert unit is not None
    return unit


def test_a_job_whose_fetch_reply_was_lost_goes_back_to_its_queue_and_running_ones_stay(
    fetch: ReliableFetch, proxy: ReplyCutter, r: redis.Redis
) -> None:
    same, finished = job("same"), job("finished")
    for payload in (same, finished, same):  # two identical payloads: two units, counted apart
        r.lpush("queue:default", payload)
    running = take(fetch)
    assert running.job == same
    finished_unit = take(fetch)
    proxy.cut_next_reply(down=True)  # Redis runs the next fetch; its reply dies with the connection
    with pytest.raises(redis.ConnectionError):
        fetch.retrieve_work()
    assert r.lrange("queue:default", 0, -1) == []
    assert r.lrange(WORKING, 0, -1) == [same, finished, same]  # moved: in Redis, unknown to the worker
    finished_unit.acknowledge()  # finished while Redis is away: its acknowledgement is pending, not to be requeued
    proxy.up()
    stranded = take(fetch)  # Redis answers again: the first fetch reconciles, and the stranded job is fetched again
    assert stranded.job == same
    # the running copy and the finished job were not requeued: nothing is left in the queue, nothing fetched twice
    assert r.lrange("queue:default", 0, -1) == []
    assert fetch.retrieve_work() is None
    wait_until(lambda: r.lrange(WORKING, 0, -1) == [same, same], 5, message="the finished job's acknowledgement")
    running.acknowledge()
    stranded.acknowledge()
    wait_until(lambda: r.llen(WORKING) == 0, 5, message="both acknowledged")


def test_a_fetch_sent_again_on_a_new_connection_leaves_nothing_stranded(
    fetch: ReliableFetch, proxy: ReplyCutter, r: redis.Redis
) -> None:
    assert fetch.retrieve_work() is None  # the fetch script is loaded: the reply cut next is the fetch's own
    first, second = job("first"), job("second")
    r.lpush("queue:default", first, second)
    proxy.cut_next_reply()  # the connection breaks after Redis ran the fetch; the fetch is sent again, and works
    assert take(fetch).job == second
    assert r.lrange(WORKING, 0, -1) == [second, first]
    assert take(fetch).job == first  # the next fetch put it back first, and took it
    assert r.lrange("queue:default", 0, -1) == []
    assert r.lrange(WORKING, 0, -1) == [first, second]


@pytest.mark.slow
def test_a_worker_runs_the_job_of_a_lost_fetch_reply_soon_after_redis_answers_again(
    redis_server: AofRedis, proxy: ReplyCutter, r: redis.Redis
) -> None:
    pusher = kiq.Config(redis_url=redis_server.url)
    try:
        jid = kiq.Client(pusher).push({"class": "OutcomesTouchesRedis", "args": [1]})
    finally:
        pusher.redis.close()
    assert jid is not None
    # the fetch that moves this job is run by Redis, and its reply lost; Redis then "away" for a while
    proxy.cut_next_reply(down=True, marker=f'"jid":"{jid}"'.encode())
    args = ["-r", "tests.jobs.outcomes", "-c", "2", "--fetch", "reliable"]
    url = f"redis://127.0.0.1:{proxy.port}/0"
    with InProcessWorker(args, url, FAST) as worker:
        wait_until(lambda: proxy.cuts == 1, 30, message="the fetch reply cut")
        working = [key for key in r.scan_iter("kiq:working:*") if r.llen(key)]
        assert len(working) == 1 and r.llen("queue:default") == 0  # moved, and no thread runs it
        assert not r.sismember(DONE, jid)
        proxy.up()
        try:  # within seconds (BACK_WITHIN of tests/server/test_outcomes.py); generous here for a loaded machine
            wait_until(lambda: r.sismember(DONE, jid), 30, message="the stranded job run after Redis is back")
            wait_until(lambda: not r.llen(working[0]), 10, message="its acknowledgement")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{worker.output()}") from None
        assert worker.stop() == 0
        output = worker.output()
    assert "1 job(s) a lost Redis reply left" in output, output
