"""Reliable push against a real redis-server of the test's own (AOF on), stopped and started again: pushes during
the outage return their jids, are held in memory and land in the queue, in order, when Redis is back."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import kiq
from kiq import reliable_push
from tests.jobs.basic import Record
from tests.outage_support import AofRedis, aof_redis
from tests.sentinel_support import free_port
from tests.support import ROOT, InProcessWorker, child_env, wait_until


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AofRedis]:
    with aof_redis(tmp_path / "redis") as own:
        yield own


def queued_in_order(client: redis.Redis, queue: str = "default") -> list[str]:
    """The first argument of every job of ``queue``, in the order the workers will take them (BRPOP: oldest first)."""
    return [json.loads(data)["args"][0] for data in reversed(client.lrange(f"queue:{queue}", 0, -1))]


def first_seen(keys: list[str]) -> list[str]:
    """``keys`` without repeats (a write whose reply an outage cut off may be sent twice: at least once)."""
    return list(dict.fromkeys(keys))


def outage_messages(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(record.levelname, record.getMessage()) for record in caplog.records if "reliable push" in record.msg]


def test_5000_pushes_across_a_5_s_outage_all_land_in_order_and_run(
    server: AofRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kiq")
    config = kiq.Config(redis_url=server.url, reliable_push=True)
    client = kiq.Client(config)
    total, jids, pushed = 5000, [], threading.Event()
    errors: list[BaseException] = []

    def push_all() -> None:
        try:
            for number in range(total):
                jids.append(client.push({"class": Record, "args": [str(number)]}))
                time.sleep(0.002)  # spread the pushes over the outage: about 10 s in all
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            pushed.set()

    pusher = threading.Thread(target=push_all)
    pusher.start()
    wait_until(lambda: len(jids) >= 500, 30, message="500 pushes before the outage")
    server.stop("term")
    outage_start = len(jids)
    time.sleep(5)  # the outage's length, not a wait for a condition
    during = len(jids) - outage_start
    server.start()
    assert pushed.wait(120)
    pusher.join()
    assert not errors, errors
    assert len(jids) == total and all(jids)
    assert during > 100, f"only {during} pushes during the outage"

    watch = server.client()
    wait_until(lambda: watch.llen("queue:default") >= total, 30, message="every held job sent")
    keys = queued_in_order(watch)
    assert first_seen(keys) == [str(number) for number in range(total)]  # every job, in the order pushed
    assert outage_messages(caplog)[0][0] == "WARNING"
    assert [level for level, _ in outage_messages(caplog)] == ["WARNING", "INFO"], outage_messages(caplog)
    assert "sent the" in outage_messages(caplog)[1][1]

    with InProcessWorker(["-r", "tests.jobs.basic", "-q", "default", "-c", "5"], server.url) as worker:
        wait_until(lambda: watch.hlen("performed") == total, 120, message="every job run")
        worker.stop()
    runs = watch.hgetall("performed")
    assert set(runs) == {str(number) for number in range(total)} and all(int(count) >= 1 for count in runs.values())


def test_an_outage_longer_than_the_buffer_raises_and_keeps_what_it_held(
    server: AofRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kiq")
    config = kiq.Config(redis_url=server.url, reliable_push=True, reliable_push_limit=100)
    client = kiq.Client(config)
    server.stop("term")
    with pytest.raises(kiq.PushBufferFull, match="holds 0 job"):  # more than the limit at once: nothing held
        client.push_bulk({"class": Record, "args": [[str(number)] for number in range(101)]})
    held = [client.push({"class": Record, "args": [str(number)]}) for number in range(100)]
    assert all(held)
    with pytest.raises(kiq.PushBufferFull, match="reliable_push_limit = 100") as refused:
        client.push({"class": Record, "args": ["over"]})
    assert isinstance(refused.value, redis.ConnectionError)  # what a push raises without reliable push
    with pytest.raises(kiq.PushBufferFull):
        client.push_bulk({"class": Record, "args": [["bulk-1"], ["bulk-2"]]})
    server.start()
    watch = server.client()
    wait_until(lambda: watch.llen("queue:default") >= 100, 30, message="the held jobs sent")
    assert first_seen(queued_in_order(watch)) == [str(number) for number in range(100)]
    assert client.push({"class": Record, "args": ["after"]})
    assert queued_in_order(watch)[-1] == "after"
    assert [level for level, _ in outage_messages(caplog)] == ["WARNING", "INFO"]
    assert "sent the 100 job(s)" in outage_messages(caplog)[1][1]


def full_buffer_caught_sending(server: AofRedis, config: kiq.Config, monkeypatch: pytest.MonkeyPatch) -> redis.Redis:
    """100 jobs held (the limit) in an outage, then Redis back with its writes paused for 3 s and their send under
    way (held until its reply); returns a client of the server. No attempt is due until the pause is on (the backoff
    is an hour): the 100th push, by the asyncio client, makes one due and wakes the background sender."""
    monkeypatch.setattr(reliable_push, "BACKOFF", (3600.0, 3600.0))
    client = kiq.Client(config)
    server.stop("term")
    assert all(client.push({"class": Record, "args": [str(number)]}) for number in range(99))
    server.start()
    watch = server.client()
    watch.execute_command("CLIENT", "PAUSE", 3000, "WRITE")
    for buffer in reliable_push.held.values():
        buffer.next_attempt = time.monotonic()
    assert asyncio.run(kiq.AsyncClient(config).push({"class": Record, "args": ["99"]}))
    wait_until(lambda: any(buffer.sending.locked() for buffer in reliable_push.held.values()), 10, message="the send")
    return watch


@pytest.mark.parametrize("client_kind", ["sync", "asyncio"])
def test_a_push_to_a_full_buffer_while_its_jobs_are_being_sent_waits_for_the_send(
    server: AofRedis, client_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis is back and the held jobs are on their way: the buffer still counts them until the reply, so a push
    then found it full and raised PushBufferFull, though nothing was unreachable."""
    config = kiq.Config(redis_url=server.url, reliable_push=True, reliable_push_limit=100)
    client = kiq.Client(config)
    watch = full_buffer_caught_sending(server, config, monkeypatch)
    if client_kind == "sync":
        assert client.push({"class": Record, "args": ["after"]})
    else:
        assert asyncio.run(kiq.AsyncClient(config).push({"class": Record, "args": ["after"]}))
    assert queued_in_order(watch) == [*(str(number) for number in range(100)), "after"]  # and in order


def test_a_push_to_a_full_buffer_whose_send_hangs_raises_after_the_wait(
    server: AofRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The send under way outlasts SEND_WAIT (Redis paused past it): the push raises PushBufferFull and adds nothing;
    the held jobs are sent once Redis writes again."""
    monkeypatch.setattr(reliable_push, "SEND_WAIT", 0.3)
    config = kiq.Config(redis_url=server.url, reliable_push=True, reliable_push_limit=100)
    client = kiq.Client(config)
    watch = full_buffer_caught_sending(server, config, monkeypatch)
    with pytest.raises(kiq.PushBufferFull, match="holds 100 job"):
        client.push({"class": Record, "args": ["over"]})
    wait_until(lambda: not reliable_push.held, 10, message="the held jobs sent")
    assert queued_in_order(watch) == [str(number) for number in range(100)]  # each once, and not the refused one


def test_bulk_and_scheduled_pushes_are_held_too(server: AofRedis) -> None:
    config = kiq.Config(redis_url=server.url, reliable_push=True)
    client = kiq.Client(config)
    server.stop("term")
    jids = client.push_bulk({"class": Record, "args": [[str(number)] for number in range(2500)]})
    later = client.push({"class": Record, "args": ["later"], "at": time.time() + 3600})
    assert len(jids) == 2500 and all(jids) and later
    server.start()
    watch = server.client()
    wait_until(lambda: watch.llen("queue:default") >= 2500 and watch.zcard("schedule") == 1, 30)
    assert first_seen(queued_in_order(watch)) == [str(number) for number in range(2500)]
    assert json.loads(watch.zrange("schedule", 0, -1)[0])["jid"] == later


def test_the_asyncio_client_holds_its_pushes_too(server: AofRedis) -> None:
    config = kiq.Config(redis_url=server.url, reliable_push=True)

    async def push(first: int, count: int) -> list[str | None]:
        client = kiq.AsyncClient(config)
        try:
            return [await client.push({"class": Record, "args": [str(n)]}) for n in range(first, first + count)]
        finally:
            await client.close()

    assert all(asyncio.run(push(0, 10)))
    server.stop("term")
    assert all(asyncio.run(push(10, 300)))
    server.start()
    assert all(asyncio.run(push(310, 10)))  # behind the held jobs, whether or not they were sent yet
    watch = server.client()
    wait_until(lambda: watch.llen("queue:default") >= 320, 30, message="every async push")
    assert first_seen(queued_in_order(watch)) == [str(number) for number in range(320)]


def test_off_a_push_during_an_outage_raises(server: AofRedis) -> None:
    config = kiq.Config(redis_url=server.url)
    server.stop("term")
    with pytest.raises(redis.ConnectionError) as refused:
        kiq.Client(config).push({"class": Record, "args": ["x"]})
    assert not isinstance(refused.value, kiq.PushBufferFull)

    async def push() -> None:
        client = kiq.AsyncClient(config)
        try:
            await client.push({"class": Record, "args": ["y"]})
        finally:
            await client.close()

    with pytest.raises(redis.ConnectionError):
        asyncio.run(push())
    server.start()
    assert server.client().llen("queue:default") == 0


def test_jobs_still_held_at_exit_are_logged_as_replayable_commands() -> None:
    script = (
        "import logging, kiq\n"
        "logging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s')\n"
        f"config = kiq.Config(redis_url='redis://127.0.0.1:{free_port()}/0', reliable_push=True)\n"
        "client = kiq.Client(config)\n"
        "print(client.push({'class': 'Record', 'args': ['a']}))\n"
        "print(client.push({'class': 'Record', 'args': ['b'], 'at': 4102444800.0}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    jids = done.stdout.split()
    lines = [line for line in done.stderr.splitlines() if "not sent: " in line]
    assert len(lines) == 2 and all(line.startswith("ERROR ") for line in lines), done.stderr
    command, _, data = lines[0].partition("not sent: ")[2].partition(" {")
    assert command == "LPUSH queue:default" and json.loads("{" + data)["jid"] == jids[0]
    command, _, data = lines[1].partition("not sent: ")[2].partition(" {")
    assert command == "ZADD schedule 4102444800.0" and json.loads("{" + data)["jid"] == jids[1]
    assert done.stderr.count("WARNING") == 1


def test_threads_pushing_across_an_outage_lose_nothing_and_keep_each_ones_order(server: AofRedis) -> None:
    config = kiq.Config(redis_url=server.url, reliable_push=True)
    client = kiq.Client(config)
    threads, each, counts = 4, 500, [0] * 4

    def push(thread: int) -> None:
        for number in range(each):
            assert client.push({"class": Record, "args": [f"{thread}-{number}"]})
            counts[thread] += 1
            time.sleep(0.002)

    pushers = [threading.Thread(target=push, args=(thread,)) for thread in range(threads)]
    for pusher in pushers:
        pusher.start()
    wait_until(lambda: min(counts) >= 50, 30, message="pushes before the outage")
    server.stop("term")
    before = sum(counts)
    wait_until(lambda: sum(counts) >= before + 400, 30, message="pushes during the outage")
    server.start()
    for pusher in pushers:
        pusher.join(60)
    assert counts == [each] * threads
    watch = server.client()
    wait_until(lambda: watch.llen("queue:default") >= threads * each, 30, message="every held job sent")
    keys = first_seen(queued_in_order(watch))
    for thread in range(threads):
        assert [key for key in keys if key.startswith(f"{thread}-")] == [f"{thread}-{n}" for n in range(each)]


def out_of_order(keys: list[str], threads: int) -> list[str]:
    """Every job that landed after a later push of its own thread (``keys``: as queued, oldest first, repeats kept)."""
    late: list[str] = []
    for thread in range(threads):
        highest = -1
        for key in keys:
            owner, _, number = key.partition("-")
            if owner == str(thread):
                if int(number) < highest:
                    late.append(f"{key} after {thread}-{highest}")
                highest = max(highest, int(number))
    return late


@pytest.mark.parametrize("pushers", ["threads", "tasks"])
def test_eight_pushers_across_a_4_s_outage_keep_each_ones_order_repeats_included(
    server: AofRedis, pushers: str
) -> None:
    """8 threads (or asyncio tasks) x 400 pushes, starting while Redis is down for 4 s: each one's jobs land in the
    order it pushed them, every copy counted. Reported as a thread's job 0 landing after its job 124: threads that
    asked a fresh config for its client at once each made one, so a thread's first jobs were held for one
    connection pool and its later ones for another, two buffers sent in either order. Thread switches as often as
    Python allows make that race likely, as 8 threads on a loaded machine did."""
    config = kiq.Config(redis_url=server.url, reliable_push=True)
    count, each, counts = 8, 400, [0] * 8

    def push(pusher: int) -> None:
        client = kiq.Client(config)
        for number in range(each):
            assert client.push({"class": Record, "args": [f"{pusher}-{number}"]})
            counts[pusher] += 1
            time.sleep(0.002)

    async def push_async() -> None:
        client = kiq.AsyncClient(config)

        async def task(pusher: int) -> None:
            for number in range(each):
                assert await client.push({"class": Record, "args": [f"{pusher}-{number}"]})
                counts[pusher] += 1
                await asyncio.sleep(0.002)

        await asyncio.gather(*(task(pusher) for pusher in range(count)))
        await client.close()

    if pushers == "threads":
        started = [threading.Thread(target=push, args=(pusher,)) for pusher in range(count)]
    else:
        started = [threading.Thread(target=lambda: asyncio.run(push_async()))]
    server.stop("kill")
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in started:
            thread.start()
        wait_until(lambda: min(counts) >= 20, 30, message="pushes held during the outage")
    finally:
        sys.setswitchinterval(interval)
    assert len(reliable_push.held) == 1  # one buffer for the one Redis: the jobs leave it in the order pushed
    time.sleep(4)  # the outage's length, not a wait for a condition
    server.start()
    for thread in started:
        thread.join(60)
    assert counts == [each] * count
    watch = server.client()
    wait_until(lambda: watch.llen("queue:default") >= count * each, 30, message="every held job sent")
    keys = queued_in_order(watch)
    assert set(keys) == {f"{pusher}-{n}" for pusher in range(count) for n in range(each)}
    assert out_of_order(keys, count) == []
