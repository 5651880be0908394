"""Shards: named Redis servers besides ``redis_url``. A push goes to one (``Job.set(shard=...)``), a worker serves the
ones it is told (``--shard``), and the API and the CLI look at each (``config.for_shard``, ``--shard``). Here the
shards are other databases of the test Redis, as separate as separate servers for everything kiq does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import kiq
from kiq.api import Stats
from kiq.cli import main
from tests.jobs.basic import Record
from tests.support import FAST, WorkerProcess, spare_url, wait_until

StartWorker = Callable[..., WorkerProcess]
SHARD_DBS = {"eu": 1, "us": 2}  # spare databases of the test's Redis (tests.support.spare_url)


@pytest.fixture
def sharded(config: kiq.Config) -> Iterator[dict[str, redis.Redis]]:
    """``config`` with the shards eu and us (emptied before and after); their raw clients by name."""
    assert config.redis_url is not None
    config.shards = {name: spare_url(config.redis_url, db) for name, db in SHARD_DBS.items()}
    clients = {name: redis.Redis.from_url(url, decode_responses=True) for name, url in config.shards.items()}
    for client in clients.values():
        client.flushdb()
    yield clients
    for client in clients.values():
        client.flushdb()
        client.close()


def queued(client: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(f"queue:{queue}", 0, -1)]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"eu": "redis://a:6379/0"}, {"eu": "redis://a:6379/0"}),
        ("eu=redis://a:6379/0 us=redis://b:6379/1", {"eu": "redis://a:6379/0", "us": "redis://b:6379/1"}),
        ('{"eu": "redis://a:6379/0"}', {"eu": "redis://a:6379/0"}),
    ],
)
def test_shards_come_as_a_table_pairs_or_json(raw: Any, expected: dict[str, str]) -> None:
    assert kiq.Config(shards=raw).shards == expected


@pytest.mark.parametrize("raw", ["eu", {"eu": 5}, ["redis://a"], "=redis://a"])
def test_bad_shards_name_the_setting(raw: Any) -> None:
    with pytest.raises(kiq.ConfigError, match="'shards'"):
        kiq.Config(shards=raw)


def test_a_push_goes_to_its_shard_through_the_configs_middleware(
    config: kiq.Config, r: redis.Redis, sharded: dict[str, redis.Redis]
) -> None:
    stamped: list[str] = []

    class Stamp(kiq.ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Any:
            stamped.append(job["jid"])
            yield

    config.client_middleware.add(Stamp)
    eu = Record.set(config=config, shard="eu").perform_async("to eu")
    us = Record.set(config=config).set(shard="us").perform_async("to us")  # kept through a second set()
    home = Record.set(config=config).perform_async("home")
    asyncio.run(_async_push(config))
    assert [job["jid"] for job in queued(sharded["eu"])][-1] == eu and [job["jid"] for job in queued(r)] == [home]
    assert [job["args"] for job in queued(sharded["us"])] == [["async to us"], ["to us"]] and us
    assert all("shard" not in job for job in queued(sharded["eu"]))  # where it went is not written into the job
    assert len(stamped) == 4
    with pytest.raises(kiq.ConfigError, match="no shard 'asia'; the shards are: eu, us"):
        Record.set(config=config, shard="asia").perform_async("nowhere")


async def _async_push(config: kiq.Config) -> None:
    try:
        await Record.set(config=config, shard="us").aio.perform_async("async to us")
    finally:
        await kiq.AsyncClient(config).close()


def test_the_api_and_the_cli_look_at_one_shard(
    config: kiq.Config, sharded: dict[str, redis.Redis], capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    sharded["eu"].set("stat:processed", 7)
    assert Stats(config.for_shard("eu")).processed == 7 and Stats(config).processed == 0
    settings = tmp_path / "kiq.toml"
    settings.write_text(f'redis_url = "{config.redis_url}"\n[shards]\n' + "".join(
        f'{name} = "{url}"\n' for name, url in config.shards.items()
    ))  # fmt: skip
    assert main(["stats", "-C", str(settings), "--shard", "eu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["processed"] == 7
    assert main(["stats", "-C", str(settings), "--shard", "asia"]) == 2
    assert "no shard 'asia'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_worker_serves_the_shards_it_is_told(start_worker_process: StartWorker, e2e_config: kiq.Config) -> None:
    assert e2e_config.redis_url is not None
    shards = {name: spare_url(e2e_config.redis_url, db) for name, db in SHARD_DBS.items()}
    clients = {name: redis.Redis.from_url(url, decode_responses=True) for name, url in shards.items()}
    for client in clients.values():
        client.flushdb()
    try:
        e2e_config.shards = shards
        for name in shards:
            Record.set(config=e2e_config, shard=name).perform_bulk([[f"{name}-{n}"] for n in range(20)])
        Record.set(config=e2e_config).perform_async("home")  # no worker serves redis_url here: it stays
        env = {**FAST, "KIQ_SHARDS": json.dumps(shards)}
        worker = start_worker_process("-r", "tests.jobs.basic", "--shard", "eu", "--shard", "us", env=env)
        for name, client in clients.items():
            wait_until(lambda client=client: client.hlen("performed") == 20, 30, message=f"shard {name}'s jobs")
            assert all(key.startswith(name) for key in client.hkeys("performed"))
        assert e2e_config.redis.llen("queue:default") == 1
        assert "swarm of 2 worker processes started" in worker.output()
        assert worker.stop() == 0
    finally:
        for client in clients.values():
            client.flushdb()
            client.close()
