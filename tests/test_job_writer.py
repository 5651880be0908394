"""The ``kiq_job_writer`` seam: a plugin writes some pushed jobs its own way, in the push's round trip (single,
bulk, asyncio); None leaves a job to kiq; a writer that raises fails that push and writes nothing of it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

import kiq
import kiq.ext


class Aside:
    """Writes the jobs of queue "aside" into the list ``aside-list`` instead of ``queue:aside``."""

    def commands(self, queue: str, jid: str, job: str, keys: kiq.ext.Keyspace) -> list[tuple[Any, ...]] | None:
        if queue == "broken":
            raise RuntimeError(f"no place for {jid}")
        return [("RPUSH", keys.key("aside-list"), job)] if queue == "aside" else None


class AsidePlugin:
    @kiq.hookimpl
    def kiq_job_writer(self) -> Aside:
        return Aside()


@kiq.job(queue="aside")
def aside_job(n: int) -> None: ...


def test_a_writer_takes_its_jobs_and_leaves_the_others(config: kiq.Config, r: redis.Redis) -> None:
    config.add_plugin(AsidePlugin())
    keys = kiq.ext.keyspace(r)
    aside_job.perform_async(1)
    aside_job.perform_bulk([[2], [3]])
    asyncio.run(aside_job.aio.perform_async(4))
    aside_job.set(queue="default").perform_async(5)
    assert [kiq.ext.loads(job)["args"] for job in r.lrange(keys.key("aside-list"), 0, -1)] == [[1], [2], [3], [4]]
    assert kiq.Queue("aside").size == 0 and kiq.Queue("default").size == 1
    assert "aside" in [queue.name for queue in kiq.Queue.all()]  # listed as any queue pushed to


def test_a_writer_that_raises_fails_the_push_and_writes_nothing(config: kiq.Config, r: redis.Redis) -> None:
    config.add_plugin(AsidePlugin())
    with pytest.raises(RuntimeError, match="no place for"):
        aside_job.set(queue="broken").perform_bulk([[1], [2]])
    assert kiq.Queue("broken").size == 0 and r.dbsize() == 0
