"""The embedded Redis: started once per directory, shared by processes, survives its starters; URL forms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import kiq
import kiq.ext
from kiq.connection import DedicatedConnection
from kiq.embedded import EmbeddedRedis
from kiq.pipeline import _shelves, follow_new_master, run_pipeline
from kiq.redis import connect

from .cluster_support import ClusterPool
from .support import connection_ids, raw_redis, wait_until


def test_embedded_server_is_shared_between_processes(tmp_path: Path) -> None:
    directory = tmp_path / "kiq"
    script = (
        "import sys, kiq\n"
        "config = kiq.Config(embedded_dir=sys.argv[1])\n"
        "config.redis.incr('starts')\n"
        "print(config.redis.connection_pool.connection_kwargs['path'])\n"
    )
    outputs = [
        subprocess.run(
            [sys.executable, "-c", script, str(directory)], check=True, capture_output=True, text=True
        ).stdout.strip()
        for _ in range(2)
    ]
    assert outputs[0] == outputs[1] == str(directory / "redis.sock")
    server = EmbeddedRedis(directory)
    try:
        client = connect(None, str(directory))
        assert client.get("starts") == "2"  # both processes wrote to the one server, which outlived them
        client.close()
    finally:
        assert server.stop()
    assert not server.stop()  # already stopped


def test_embedded_server_keeps_data_across_restarts(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path)
    client = redis.Redis.from_url(server.ensure_running())
    client.lpush("queue:default", "job")
    client.close()
    server.stop()
    client = redis.Redis.from_url(server.ensure_running())
    try:
        assert client.lrange("queue:default", 0, -1) == [b"job"]
    finally:
        client.close()
        server.stop()


def test_start_is_one_warning_naming_the_directory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="kiq")
    for _ in range(2):  # the second connection shares the running server: nothing more to warn about
        client = connect(None, str(tmp_path))
        client.ping()
        client.close()
    EmbeddedRedis(tmp_path).stop()
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert str(tmp_path) in warnings[0] and "not for production" in warnings[0]
    assert "KIQ_REDIS_URL" in warnings[0] and "kiq embedded stop" in warnings[0]


def test_embedded_off_makes_a_missing_redis_url_an_error(tmp_path: Path) -> None:
    config = kiq.Config(embedded_dir=str(tmp_path / "kiq"), embedded=False)
    with pytest.raises(kiq.ConfigError) as refused:
        config.redis.ping()
    message = str(refused.value)
    for name in ("redis_url", "KIQ_REDIS_URL", "embedded = false", "KIQ_EMBEDDED"):
        assert name in message
    assert not (tmp_path / "kiq").exists()  # nothing was started
    assert kiq.Config.load(env={"KIQ_EMBEDDED": "0"}).embedded is False


def test_running_url_starts_nothing(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "kiq")
    assert server.running_url() is None
    assert not (tmp_path / "kiq").exists()
    url = server.ensure_running()
    try:
        assert server.running_url() == url
    finally:
        server.stop()
    assert server.running_url() is None


def test_url_forms(redis_url: str) -> None:
    client = connect(redis_url)
    assert client.ping()
    client.close()
    with pytest.raises(kiq.ConfigError, match="bad redis_url") as refused:
        connect("http://example.invalid")
    for scheme in ("redis://", "rediss://", "unix://", "redis+sentinel://"):
        assert scheme in str(refused.value)
    with pytest.raises(kiq.ConfigError, match="service name"):
        connect("redis+sentinel://127.0.0.1:26379")


def test_only_kiq_is_importable_from_an_installed_kiq(tmp_path: Path) -> None:
    """The source folders map to kiq, kiq.plugins and kiq.contrib; none of them is a top-level module."""
    probe = "import importlib.util as u; print([n for n in ('core', 'plugins', 'contrib') if u.find_spec(n)])"
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
    import kiq.contrib
    import kiq.plugins

    assert Path(kiq.plugins.__file__).parent.name == "plugins"
    assert Path(kiq.contrib.__file__).parent.name == "contrib"


@pytest.mark.own_redis
def test_dedicated_connection_sends_commands_and_scripts_and_survives_a_dropped_connection(
    config: kiq.Config, r: redis.Redis
) -> None:
    connection = DedicatedConnection(config.redis)
    r.rpush("list", "a", "b", "c")
    assert connection.command("RPOP", "list", 2) == ["c", "b"]  # decoded as the client's replies
    script = "return redis.call('LLEN', KEYS[1]) + tonumber(ARGV[1])"
    r.script_flush()
    assert connection.script(script, ["list"], [10]) == 11  # loaded on NOSCRIPT, then run
    client_id = connection.command("CLIENT", "ID")
    r.client_kill_filter(_id=client_id)
    assert connection.command("LLEN", "list") == 1  # sent again on a new connection
    assert connection.command("CLIENT", "ID") != client_id
    with pytest.raises(redis.ResponseError):
        connection.command("LPUSH", "list")  # an error reply keeps the connection
    assert connection.command("LLEN", "list") == 1
    connection.release()


def test_a_dedicated_connection_on_a_cluster_does_not_send_again_a_command_whose_connection_broke(
    cluster_pool: ClusterPool,
) -> None:
    """redis-py's cluster client sends a command whose connection broke once more, silently; a reliable fetch must
    know that the first sending may have run with its reply lost (``broken``), so this connection's commands are not
    sent again: the error reaches the caller."""
    cluster = cluster_pool.get("redis7")
    client = connect(cluster.url)
    connection = DedicatedConnection(client)
    key = "{kiq}dedicated-broken"
    outcome: list[object] = []

    def block() -> None:
        try:
            outcome.append(connection.command("BLPOP", key, 5))
        except redis.ConnectionError as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=block)
    waiter.start()
    node = client.get_node_from_key(key)
    admin = redis.Redis(host=node.host, port=node.port, decode_responses=True)
    try:
        blocked = wait_until(
            lambda: [c for c in admin.client_list(_type="normal") if c["cmd"] == "blpop"], 10, message="the BLPOP"
        )
        admin.client_kill_filter(_id=blocked[0]["id"])
        waiter.join(10)
    finally:
        admin.close()
        client.close()
    assert len(outcome) == 1 and isinstance(outcome[0], redis.ConnectionError), outcome  # not a None 5 s later
    assert connection.broken == 1


def client_id(client: redis.Redis) -> int:
    """The id of the connection ``run_pipeline`` uses for ``client`` (its pool's shelved one, once there is one)."""
    [found] = run_pipeline(client, [("CLIENT", "ID")])
    return int(found)


def take_and_give_back(pool: redis.BlockingConnectionPool, count: int) -> None:
    """Take ``count`` connections out of ``pool`` at once (ConnectionError when it has fewer free), give them back."""
    taken = [pool.get_connection() for _ in range(count)]  # type: ignore[no-untyped-call]
    for connection in taken:
        pool.release(connection)  # type: ignore[no-untyped-call]


def test_run_pipeline_returns_every_reply_in_order(config: kiq.Config) -> None:
    commands = [
        ("SET", "counter", 41),
        ("INCR", "counter"),
        ("RPUSH", "list", "a", "b"),
        ("LRANGE", "list", 0, -1),
        ("GET", "missing"),
        ("ZADD", "set", 1.5, "x", 1e20, "y"),
        ("ZCOUNT", "set", 1.5, 1.5),
    ]
    assert run_pipeline(config.redis, commands) == ["OK", 42, 2, ["a", "b"], None, 2, 1]


def test_run_pipeline_raises_the_first_error_reply_after_reading_every_reply_and_keeps_its_connection(
    config: kiq.Config, r: redis.Redis
) -> None:
    r.set("text", "not a list")
    before = client_id(config.redis)
    commands = [("INCR", "n"), ("LPUSH", "text", "a"), ("INCR", "text"), ("INCR", "n"), ("CLIENT", "ID")]
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):  # the first error, not the INCR's
        run_pipeline(config.redis, commands)
    assert r.get("n") == "2"  # the commands after the error ran
    assert run_pipeline(config.redis, [("GET", "n"), ("CLIENT", "ID")]) == ["2", before]  # in step, same connection
    assert client_id(config.redis) == before


def test_run_pipeline_sends_again_as_the_clients_retry_says_on_a_connection_the_server_killed(
    config: kiq.Config, redis_url: str
) -> None:
    retrying = redis.Redis.from_url(redis_url, retry=Retry(NoBackoff(), 1))
    other = raw_redis(config)
    try:
        killed = client_id(retrying)
        other.client_kill_filter(_id=str(killed))
        replies = run_pipeline(retrying, [("LPUSH", "queue:default", "job"), ("CLIENT", "ID")])
        assert replies[0] == 1 and replies[1] != killed
        assert client_id(retrying) == replies[1]  # the new connection is the shelved one now
        assert other.llen("queue:default") == 1  # written once
    finally:
        retrying.close()
        other.close()


def test_a_push_after_the_server_dropped_the_idle_connection_is_written_once(config: kiq.Config) -> None:
    other = raw_redis(config)
    try:
        client = kiq.Client(config)
        client.push({"class": "Ruby::Mailer", "args": [1]})
        killed = client_id(config.redis)
        other.client_kill_filter(_id=str(killed))  # as a server's idle timeout, a proxy or a restart does
        client.push({"class": "Ruby::Mailer", "args": [2]})
        assert other.llen("queue:default") == 2
        assert client_id(config.redis) != killed
    finally:
        other.close()


def test_run_pipeline_keeps_one_idle_connection_and_starves_no_other_user_of_the_pool(
    config: kiq.Config, redis_url: str
) -> None:
    small = connect(redis_url, pool_size=3)
    pool = small.connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool)
    pool.timeout = 5  # a starved thread fails in 5 s, not 30
    client = kiq.Client(config, redis=small)
    errors: list[BaseException] = []

    def push(thread: int) -> None:
        try:
            for n in range(200):
                client.push({"class": "Crowd", "args": [thread, n], "queue": "crowd"})
                if n % 20 == 0:
                    small.llen("queue:crowd")  # a command through the pool, as the API and the server send
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=push, args=(thread,)) for thread in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert errors == []
        assert small.llen("queue:crowd") == 1600
        assert len(_shelves.get(pool)) == 1
        pool.timeout = 1
        take_and_give_back(pool, 2)  # every connection but the shelved one is free
    finally:
        small.close()


def test_threads_first_on_a_pool_leave_every_connection_but_one_to_the_pool(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = connect(redis_url, pool_size=10)
    pool = small.connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool)
    start = threading.Barrier(4)

    def slow_shelf() -> list[Any]:  # widens the window between the look-up and the store, as a thread switch can
        time.sleep(0.01)
        return []

    def first_call() -> None:
        start.wait()
        run_pipeline(small, [("PING",)])

    threads = [threading.Thread(target=first_call) for _ in range(4)]
    monkeypatch.setattr(_shelves, "_make", slow_shelf)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    monkeypatch.undo()
    try:
        pool.timeout = 0.2  # a free connection is handed over at once
        take_and_give_back(pool, 9)  # every connection but the shelved one is free
    finally:
        small.close()


def test_after_the_worker_follows_a_new_master_no_connection_of_run_pipeline_stays_on_the_old_one(
    redis_url: str, r: redis.Redis
) -> None:
    """``follow_new_master`` (a worker on Sentinel with ``push_replicas``, as the Sentinels name a new master) drops
    the shelved connection; one that a call is using then is dropped when the call ends, not shelved, as redis-py
    keeps it on the old master's address (a reliable fetcher's acknowledgements would go on reaching the old
    master). Here one server plays both masters: the connection ids tell the connections apart."""
    client = connect(redis_url)
    try:
        shelved = client_id(client)
        followed = kiq.ext.master_generation(client)
        replies: list[Any] = []
        call = threading.Thread(target=lambda: replies.extend(run_pipeline(client, [("CLIENT", "ID"), WAITING])))
        call.start()
        wait_until(lambda: shelved in connection_ids(r, ("blpop",)), 5, message="the call to wait in BLPOP")
        follow_new_master(client)  # while the call is under way on the shelved connection
        call.join(5)
        assert replies == [shelved, None]
        assert kiq.ext.master_generation(client) == followed + 1
        assert client_id(client) != shelved  # a new connection (the pool's would ask the Sentinels for the master)
        assert shelved not in [int(entry["id"]) for entry in r.client_list()]  # and the old one is closed
    finally:
        client.close()


WAITING = ("BLPOP", "kiq-test:nothing", 1)  # a command that is under way for a second


def test_a_forked_child_pushes_on_its_own_connection(config: kiq.Config, r: redis.Redis) -> None:
    client = kiq.Client(config)
    client.push({"class": "Forked", "args": ["parent"]})
    parent_id = client_id(config.redis)
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: push, report its connection's id, and leave without running pytest's teardown
        status = 1
        try:
            client.push({"class": "Forked", "args": ["child"]})
            os.write(writing, str(client_id(config.redis)).encode())
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    os.close(writing)
    try:
        _, status = os.waitpid(pid, 0)
        reported = os.read(reading, 64)
    finally:
        os.close(reading)
    assert os.waitstatus_to_exitcode(status) == 0
    assert int(reported) != parent_id
    client.push({"class": "Forked", "args": ["parent again"]})
    assert client_id(config.redis) == parent_id  # the child left the parent's shelved connection alone
    pushed = sorted(json.loads(raw)["args"][0] for raw in r.lrange("queue:default", 0, -1))
    assert pushed == ["child", "parent", "parent again"]


def test_run_pipeline_writes_text_read_with_surrogateescape_back_as_its_bytes(config: kiq.Config) -> None:
    raw = raw_redis(config)
    stored = b'{"class":"Hard","args":["\xff\xfe"],"jid":"x","queue":"default"}'  # not UTF-8
    try:
        raw.set("stored", stored)
        [text] = run_pipeline(config.redis, [("GET", "stored")])
        assert "\udcff\udcfe" in text
        commands: list[tuple[Any, ...]] = [("LPUSH", "queue:default", text), ("SET", "copy", text), ("PING",)]
        assert run_pipeline(config.redis, commands) == [1, "OK", "PONG"]
        assert raw.lrange("queue:default", 0, -1) == [stored] and raw.get("copy") == stored
        assert run_pipeline(config.redis, [("STRLEN", "copy")]) == [len(stored)]  # still in step
    finally:
        raw.close()


def test_a_blocking_fetch_waits_its_block_time_past_the_connections_timeout(config: kiq.Config) -> None:
    """``redis_timeout`` bounds a reply's wait; a blocking command's own wait comes on top, so an idle fetch is not
    taken for a hung server (it was with a timeout shorter than the block: a TimeoutError every idle fetch)."""
    client = connect(config.redis_url, timeout=0.2)
    connection = DedicatedConnection(client)
    try:
        began = time.monotonic()
        assert connection.command("BRPOP", "nothing", 0.5) is None
        assert connection.command("BLMOVE", "nothing", "elsewhere", "RIGHT", "LEFT", 0.5) is None
        assert time.monotonic() - began >= 1.0
        assert client.connection_pool.connection_kwargs["socket_timeout"] == 0.2
    finally:
        connection.release()
        client.close()
