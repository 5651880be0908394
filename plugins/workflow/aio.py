"""Workflow reads for asyncio code, on the event loop's Redis connection: ``await aio.status(id)``,
``await aio.result(id, wait=5)``, ``await aio.workflows()``."""

from __future__ import annotations

import asyncio
from typing import Any

import kiq
import kiq.ext
from kiq.plugins.results.store import pauses

from .keys import checked_workflow_id, index_key, workflow_key
from .outcome import answer
from .status import WorkflowPage, WorkflowStatus, page, page_range, parse, queue_reads


async def status(workflow_id: str, config: kiq.Config | None = None) -> WorkflowStatus | None:
    """``kiq.plugins.workflow.status`` without blocking the event loop."""
    redis = kiq.AsyncClient(config).redis
    pipe = redis.pipeline(transaction=True)
    queue_reads(pipe, kiq.ext.keyspace(redis), checked_workflow_id(workflow_id))
    return parse(workflow_id, await pipe.execute())


async def result(workflow_id: str, wait: float = 0.0, config: kiq.Config | None = None) -> Any:
    """``kiq.plugins.workflow.result`` without blocking the event loop."""
    redis = kiq.AsyncClient(config).redis
    key = workflow_key(kiq.ext.keyspace(redis), checked_workflow_id(workflow_id))
    for pause in pauses(wait):
        if pause is None or await redis.hget(key, "state") not in (None, "running"):
            return answer(workflow_id, await status(workflow_id, config))
        await asyncio.sleep(pause)
    raise AssertionError("pauses() ends with None")


async def workflows(limit: int = 50, cursor: str | None = None, config: kiq.Config | None = None) -> WorkflowPage:
    """``kiq.plugins.workflow.workflows`` without blocking the event loop."""
    start, stop = page_range(cursor, limit)
    redis = kiq.AsyncClient(config).redis
    return page(start, limit, await redis.zrevrange(index_key(kiq.ext.keyspace(redis)), start, stop))
