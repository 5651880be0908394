"""A FastAPI app that pushes kiq jobs from async endpoints, and lets a frontend poll a task of many jobs.

    pip install '.[tracking]' fastapi uvicorn   # from the repository's root
    uvicorn examples.fastapi_app:app                                           # the web app
    kiq worker -r examples.fastapi_app --plugins tracking -q feeds -q imports  # a worker for its jobs' queues

    curl -X POST 'localhost:8000/feeds?url=https://example.com/feed'
    curl -X POST localhost:8000/imports -H 'content-type: application/json' -d '[1, 2, 3]'
    curl localhost:8000/tracking/tasks/<task_id>            # progress, as the status page polls it

``kiq.contrib.starlette.install`` opens kiq's asyncio connections when the app starts, closes them when it stops,
and mounts the tracking endpoints under /tracking. The worker serves the queues the jobs go to (``feeds``,
``imports``): a worker serves only ``default`` unless told. tests/contrib/test_example_apps.py runs this
walk-through, the worker command above included.
"""

from __future__ import annotations

import asyncio

from fastapi import FastAPI

import kiq
from kiq.contrib.starlette import install
from kiq.plugins.tracking import message, tracker_for


class FetchFeed(kiq.Job):
    kiq_options = {"queue": "feeds", "retry": 5}

    async def perform(self, url: str) -> None:
        await asyncio.sleep(0.01)  # stands for the real work: an HTTP request, a parse, a write


class ImportProduct(kiq.Job):
    kiq_options = {"queue": "imports"}

    def perform(self, product_id: int) -> None:
        message(self, f"imported product {product_id}")  # shown on the task's status page


def create_app() -> FastAPI:
    """The app, on kiq's default config (``kiq.toml``, ``KIQ_*`` variables)."""
    app = FastAPI(title="kiq example")
    install(app)

    @app.post("/feeds")
    async def add_feed(url: str) -> dict[str, str | None]:
        return {"jid": await FetchFeed.aio.perform_async(url)}

    @app.post("/imports")
    async def import_products(product_ids: list[int]) -> dict[str, str]:
        task_id = await tracker_for().aio.create_task(ImportProduct, [[product_id] for product_id in product_ids])
        return {"task_id": task_id, "status_page": f"/tracking/tasks/{task_id}/page"}

    return app


app = create_app()
