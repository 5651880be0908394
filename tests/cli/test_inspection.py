"""The inspection commands: kiq stats | queues | retries | scheduled | dead | processes, tables and --json."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

import kiq
from kiq.cli import main
from tests.cli.helpers import Cli, failed_json, job_json
from tests.support import child_env, raw_redis


def test_stats(cli: Cli, r: redis.Redis) -> None:
    r.set("stat:processed", 12)
    r.lpush("queue:default", job_json("a"), job_json("b"))
    r.sadd("queues", "default")
    r.zadd("retry", {failed_json("c"): time.time()})
    out = cli("stats")
    assert "Processed:" in out and "12" in out
    assert any(line.split() == ["Enqueued:", "2"] for line in out.splitlines())
    assert any(line.split() == ["Retries:", "1"] for line in out.splitlines())
    data = cli.json("stats")
    assert (data["processed"], data["enqueued"], data["retry_size"], data["queues"]) == (12, 2, 1, {"default": 2})


def test_queues(cli: Cli, r: redis.Redis) -> None:
    assert cli("queues").strip() == "(none)"
    r.lpush("queue:low", job_json("a", enqueued_at=time.time() - 5))
    r.sadd("queues", "low", "default")
    lines = cli("queues").splitlines()
    assert lines[0].split() == ["QUEUE", "SIZE", "LATENCY", "PAUSED"]
    assert lines[1].split() == ["default", "0", "0.00s", "-"]
    assert lines[2].split()[:2] == ["low", "1"]
    data = cli.json("queues")
    assert [(q["name"], q["size"]) for q in data] == [("default", 0), ("low", 1)] and data[1]["latency"] >= 5


def test_retries_list_retry_delete_clear(cli: Cli, r: redis.Redis) -> None:
    now = time.time()
    r.zadd("retry", {failed_json("older"): now + 10, failed_json("newer"): now + 20, failed_json("third"): now + 30})
    out = cli("retries")
    assert out.splitlines()[0].split() == ["JID", "CLASS", "QUEUE", "RUNS", "RETRIED", "ARGS", "ERROR"]
    assert out.index("third") < out.index("newer") < out.index("older")  # newest first
    assert "ValueError: broke older" in out and "HardJob" in out
    assert "in 9s" in out or "in 10s" in out

    listed = cli.json("retries", "--limit", "2")
    assert [job["jid"] for job in listed] == ["third", "newer"] and listed[0]["error_message"] == "broke third"
    assert "(2 of 3 in the retry set" in cli("retries", "-n", "2")

    assert cli("retries", "--retry", "older").strip() == "retry: older"
    assert [json.loads(raw)["jid"] for raw in r.lrange("queue:default", 0, -1)] == ["older"]
    assert cli.json("retries", "--delete", "newer") == {"ok": True, "action": "delete", "jid": "newer"}
    assert "no job with jid 'newer' in the retry set" in cli("retries", "--delete", "newer", code=2)
    assert cli("retries", "--clear").strip() == "cleared 1 jobs from the retry set"
    assert r.zcard("retry") == 0


def test_scheduled_and_dead(cli: Cli, r: redis.Redis) -> None:
    r.zadd("schedule", {job_json("later"): time.time() + 3600})
    out = cli("scheduled")
    assert "later" in out and "in 59m" in out
    assert cli.json("scheduled", "--retry", "later")["action"] == "retry"
    assert r.zcard("schedule") == 0 and r.llen("queue:default") == 1

    r.zadd("dead", {failed_json("d1"): time.time() - 120, failed_json("d2"): time.time() - 60})
    out = cli("dead")
    assert out.splitlines()[0].split()[3] == "DIED" and "2m ago" in out
    assert cli.json("dead", "--retry-all") == {"ok": True, "action": "retry_all", "count": 2}
    assert r.zcard("dead") == 0 and r.llen("queue:default") == 3
    with pytest.raises(SystemExit):  # scheduled jobs are not retried in bulk, and actions exclude each other
        main(["scheduled", "--retry-all"])
    with pytest.raises(SystemExit):
        main(["dead", "--clear", "--delete", "x"])


def test_processes(cli: Cli, r: redis.Redis) -> None:
    identity = "box:42:abcdef123456"
    info = {"identity": identity, "hostname": "box", "pid": 42, "concurrency": 5, "queues": ["default", "low"]}
    r.sadd("processes", identity)
    r.hset(identity, mapping={"info": json.dumps({**info, "started_at": time.time() - 3600, "tag": "api"})})
    r.hset(identity, mapping={"busy": 2, "beat": time.time(), "quiet": "false", "rss": 204800})
    r.expire(identity, 60)

    lines = cli("processes").splitlines()
    assert lines[0].split() == ["IDENTITY", "TAG", "QUEUES", "BUSY", "STATE", "BEAT", "STARTED", "RSS"]
    assert lines[1].split()[:5] == [identity, "api", "default,low", "2/5", "running"]
    assert "1h ago" in lines[1] and "200 MB" in lines[1]
    (listed,) = cli.json("processes")
    assert (listed["identity"], listed["busy"], listed["quiet"]) == (identity, 2, False)

    assert cli("processes", "--quiet", "box:42").strip() == f"sent TSTP (quiet) to {identity}"
    assert cli.json("processes", "--stop", identity) == {"ok": True, "action": "stop", "identity": identity}
    assert r.lrange(f"{identity}-signals", 0, -1) == ["TERM", "TSTP"]
    assert "no live process 'other'" in cli("processes", "--stop", "other", code=2)


def test_config_file_names_the_redis(config: kiq.Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config.redis.set("stat:failed", 5)
    settings = tmp_path / "kiq.toml"
    settings.write_text(f'redis_url = "{config.redis_url}"\n')
    assert main(["stats", "-C", str(settings), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["failed"] == 5


def test_unreachable_redis_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port where nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["dead", "--redis-url", f"redis://127.0.0.1:{port}/0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kiq: error: cannot talk to Redis at redis://127.0.0.1:{port}/0:")
    assert "Traceback" not in err


def test_a_dead_payload_that_is_not_utf8_is_listed_with_escapes(config: kiq.Config) -> None:
    """Shown, not crashed on: as a table and as JSON, from a real process whose stdout is a pipe."""
    bad = b'{"class":"HardJob","args":["\xff"],"jid":"bad","queue":"default"}'
    raw_redis(config).zadd("dead", {bad: time.time()})
    for extra in ([], ["--json"]):
        run = subprocess.run(
            [sys.executable, "-m", "kiq.cli", "dead", "--redis-url", str(config.redis_url), *extra],
            capture_output=True,
            env=child_env(PYTHONIOENCODING="utf-8"),
            timeout=30,
        )
        assert run.returncode == 0, run.stderr
        assert (b"\\\\xff" if extra else b"\\xff") in run.stdout  # JSON escapes the backslash itself
