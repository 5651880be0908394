"""The embedded Redis: started once per directory, shared by processes, survives its starters; URL forms."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis

import kiq
from kiq.redis import DedicatedConnection, EmbeddedRedis, connect


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


def test_start_is_announced_in_the_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="kiq")
    client = connect(None, str(tmp_path))
    client.close()
    EmbeddedRedis(tmp_path).stop()
    assert any("embedded Redis" in record.getMessage() for record in caplog.records)


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
