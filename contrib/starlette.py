"""kiq in a Starlette or FastAPI app: the asyncio client's Redis connections live as long as the app, and the
tracking endpoints are mounted in it.

    app = FastAPI()
    kiq.contrib.starlette.install(app, config)           # or: FastAPI(lifespan=lifespan(config)) by hand

At startup the connection pool of the app's event loop is opened (a ``PING``: an unreachable Redis is logged
then, not at the first push); at shutdown it is closed (``kiq.AsyncClient(config).close()``), so a server that
reloads or stops leaves no connection behind.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

import redis

import kiq
from kiq.plugins.tracking import tracker_for

from .fastapi import mount_tracking

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request

    from .tracking_http import Authorize

log = logging.getLogger("kiq")

# what Starlette and FastAPI take as ``lifespan=``: app -> an async context manager around the app's life
Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]


def install(
    app: Starlette,
    config: kiq.Config | None = None,
    tracking: str | None = "/tracking",
    authorize: Authorize[Request] | None = None,
) -> None:
    """Run ``app`` (Starlette or FastAPI) inside ``lifespan(config)``, around its own lifespan, and mount the
    tracking endpoints under ``tracking`` (None: not at all) with the ``authorize`` hook. ``config`` None: the
    default config."""
    app.router.lifespan_context = lifespan(config, app.router.lifespan_context)
    if tracking is not None:
        mount_tracking(app, tracking, None if config is None else tracker_for(config), authorize)


def lifespan(config: kiq.Config | None = None, inner: Lifespan | None = None) -> Lifespan:
    """A lifespan that holds kiq's connections open around ``inner`` (the app's own lifespan, if any)."""

    @asynccontextmanager
    async def run(app: Any) -> AsyncIterator[Any]:
        async with connected(config):
            if inner is None:
                yield None
                return
            async with inner(app) as state:
                yield state

    return run


@asynccontextmanager
async def connected(config: kiq.Config | None = None) -> AsyncIterator[kiq.AsyncClient]:
    """The asyncio client of ``config`` with its connections open for the block, closed after it."""
    client = kiq.AsyncClient(config)
    connection = client.redis  # this event loop's client: opened here, closed at the end
    try:
        await connection.ping()
    except redis.RedisError as exc:  # the app may still serve what needs no job; pushes raise until it is back
        log.warning("kiq: Redis is unreachable at startup, pushes will fail until it answers: %s", exc)
    try:
        yield client
    finally:
        await client.close()
