"""The asyncio client: ``await MyJob.aio.perform_async(...)`` and ``kiq.AsyncClient`` write what the sync client
writes, refuse what it refuses, run the client middleware, and serve a FastAPI endpoint without blocking."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest
import redis
from fastapi import FastAPI

import kiq
from kiq.errors import InvalidJobError
from tests.support import run_async as run

T = TypeVar("T")


class Mail(kiq.Job):
    kiq_options = {"queue": "mail", "retry": 3}

    def perform(self, to: str, subject: str) -> None: ...


@kiq.job(queue="feeds")
async def fetch_feed(url: str) -> None: ...


def queued(r: redis.Redis, queue: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in reversed(r.lrange(f"queue:{queue}", 0, -1))]


def test_an_async_push_writes_what_a_sync_push_writes(config: kiq.Config, r: redis.Redis) -> None:
    sync_jid = Mail.set(config=config).perform_async("ada@example.com", "hi")
    async_jid = run(config, lambda: Mail.set(config=config).aio.perform_async("ada@example.com", "hi"))
    assert async_jid is not None and async_jid != sync_jid
    sync_job, async_job = queued(r, "mail")
    assert list(async_job) == list(sync_job)  # same fields, same order
    changing = ("jid", "created_at", "enqueued_at")
    assert {k: v for k, v in async_job.items() if k not in changing} == {
        k: v for k, v in sync_job.items() if k not in changing
    }
    assert r.smembers("queues") == {"mail"}


def test_scheduled_bulk_and_function_pushes(config: kiq.Config, r: redis.Redis) -> None:
    async def pushes() -> list[Any]:
        setter = Mail.set(config=config)
        return [
            await setter.aio.perform_in(60, "a", "later"),
            await setter.aio.perform_at(time.time() + 120, "b", "later still"),
            await setter.aio.perform_bulk([["c", "1"], ["d", "2"], ["e", "3"]]),
            await fetch_feed.set(config=config).aio.perform_async("https://example.com/feed"),
        ]

    in_60, in_120, bulk, feed = run(config, pushes)
    scheduled = {json.loads(raw)["jid"]: score for raw, score in r.zrange("schedule", 0, -1, withscores=True)}
    assert set(scheduled) == {in_60, in_120}
    assert 55 < scheduled[in_60] - time.time() <= 60 and 115 < scheduled[in_120] - time.time() <= 120
    assert [job["jid"] for job in queued(r, "mail")] == bulk and len(bulk) == 3
    assert queued(r, "feeds")[0]["jid"] == feed


@pytest.mark.parametrize(
    ("push", "message"),
    [
        (lambda setter: setter.aio.perform_async("a", {1, 2}), r"args\[1\]"),  # not JSON: named with its path
        (lambda setter: setter.aio.perform_async("a", float("nan")), "NaN"),
        (lambda setter: setter.aio.perform_async("a"), r"takes 2 arguments, got 1"),
        (lambda setter: setter.aio.perform_in(float("inf"), "a", "b"), "finite"),
        (lambda setter: setter.aio.perform_bulk([["a", "b"], ["c", "\ud800"]]), "surrogate"),
    ],
)
def test_an_async_push_refuses_what_a_sync_push_refuses_and_writes_nothing(
    config: kiq.Config, r: redis.Redis, push: Callable[[Any], Awaitable[Any]], message: str
) -> None:
    with pytest.raises((InvalidJobError, TypeError, ValueError), match=message):
        run(config, lambda: push(Mail.set(config=config)))
    assert r.dbsize() == 0


def test_client_middleware_runs_around_async_pushes(config: kiq.Config, r: redis.Redis) -> None:
    seen: list[str] = []

    class Stamp(kiq.ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Any:
            job["stamped"] = True
            yield
            seen.append(job["jid"])

    class DropSpam(kiq.ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Any:
            if job["args"][0] != "spam":
                yield

    config.client_middleware.add(Stamp)
    config.client_middleware.add(DropSpam)

    async def pushes() -> tuple[Any, Any]:
        setter = Mail.set(config=config)
        return await setter.aio.perform_async("ada", "hi"), await setter.aio.perform_async("spam", "buy")

    kept, dropped = run(config, pushes)
    assert dropped is None and len(seen) == 2 and seen[0] == kept  # the outer layer sees both ends
    (job,) = queued(r, "mail")
    assert job["stamped"] is True and job["jid"] == kept


def test_an_async_middleware_is_refused_when_added(config: kiq.Config) -> None:
    class Lookup(kiq.ClientMiddleware):
        async def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Any:  # type: ignore[override]
            yield

    with pytest.raises(TypeError, match=r"Lookup\.call is async: chains run plain generator middleware"):
        config.client_middleware.add(Lookup)


def test_a_fastapi_endpoint_pushes_without_blocking_the_loop(config: kiq.Config, r: redis.Redis) -> None:
    app = FastAPI()

    @app.post("/signup/{email}")
    async def signup(email: str) -> dict[str, Any]:
        jid = await Mail.set(config=config).aio.perform_async(email, "welcome")
        return {"jid": jid}

    async def requests() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return list(await asyncio.gather(*(http.post(f"/signup/user{n}@example.com") for n in range(20))))

    responses = run(config, requests)
    assert [response.status_code for response in responses] == [200] * 20
    jids = {response.json()["jid"] for response in responses}
    assert {job["jid"] for job in queued(r, "mail")} == jids and len(jids) == 20
