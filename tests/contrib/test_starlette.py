"""kiq.contrib.starlette: the lifespan holds the asyncio client's connections open for the app's life and closes
them at shutdown, around the app's own lifespan; and the FastAPI example app (examples/fastapi_app.py) pushes
jobs from its endpoints and serves the progress of a task it created."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from fastapi import FastAPI

import kiq
import kiq.ext
from examples.fastapi_app import create_app
from kiq.contrib.starlette import install, lifespan
from tests.support import wait_until
from tests.tracking_support import track, work_off


def client_ids(r: redis.Redis) -> set[int]:
    return {int(client["id"]) for client in r.client_list()}


def test_the_lifespan_opens_the_connections_at_startup_and_closes_them_at_shutdown(
    config: kiq.Config, r: redis.Redis
) -> None:
    async def serve() -> int:
        async with lifespan(config)(FastAPI()):
            client_id: int = await kiq.AsyncClient(config).redis.client_id()  # the connection PING opened
            assert client_id in client_ids(r)
            return client_id

    client_id = asyncio.run(serve())
    wait_until(lambda: client_id not in client_ids(r), message="the app's connection to be closed")


@asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """``app`` started as a server starts it (its lifespan), with an HTTP client to it; stopped after the block."""
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://app") as client,
    ):
        yield client


def test_install_runs_the_apps_own_lifespan_inside_kiqs(config: kiq.Config, r: redis.Redis) -> None:
    seen: list[str] = []

    @asynccontextmanager
    async def own(app: FastAPI) -> AsyncIterator[None]:
        client_id = await kiq.AsyncClient(config).redis.client_id()  # the connection kiq's startup opened
        seen.append("startup")
        yield
        seen.append(f"shutdown, kiq's connection still open: {client_id in client_ids(r)}")

    app = FastAPI(lifespan=own)
    install(app, config, tracking=None)

    async def serve() -> None:
        async with serving(app):
            pass

    asyncio.run(serve())
    assert seen == ["startup", "shutdown, kiq's connection still open: True"]


def test_an_unreachable_redis_at_startup_is_logged_and_the_app_serves(caplog: pytest.LogCaptureFixture) -> None:
    app = FastAPI()
    install(app, kiq.Config(redis_url="redis://127.0.0.1:9/0"), tracking=None)
    app.get("/")(lambda: {"ok": True})

    async def serve() -> Any:
        async with serving(app) as client:
            return (await client.get("/")).json()

    with caplog.at_level(logging.WARNING, "kiq"):
        assert asyncio.run(serve()) == {"ok": True}
    assert "Redis is unreachable at startup" in caplog.text


def test_the_fastapi_example_pushes_jobs_and_serves_a_tasks_progress(
    config: kiq.Config, r: redis.Redis, tmp_path: Path
) -> None:
    tracker = track(config, f"sqlite:///{tmp_path / 'tracking.db'}")  # the default config: what the app uses

    async def use_the_app() -> None:
        async with serving(create_app()) as client:
            jid = (await client.post("/feeds", params={"url": "https://example.com/feed"})).json()["jid"]
            [pushed] = r.lrange("queue:feeds", 0, -1)
            assert kiq.ext.loads(pushed)["jid"] == jid

            created = (await client.post("/imports", json=[1, 2, 3])).json()
            assert work_off(config, "imports") == 3
            tracker.writer.flush()
            task = (await client.get(f"/tracking/tasks/{created['task_id']}")).json()
            assert task["complete"] and task["counts"]["finished"] == 3
            assert "imported product" in task["events"][0]["messages"][0]["text"]
            assert (await client.get(created["status_page"])).status_code == 200

    try:
        asyncio.run(use_the_app())
    finally:
        tracker.writer.close(5)
