"""Reading workflows: ``kiq workflows`` (a table or JSON, one workflow in full), ``GET /workflows/<id>`` on the
tracking HTTP endpoints, the asyncio forms, the listing's pages, and typed arguments checked at the start."""

from __future__ import annotations

import asyncio
import decimal
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import kiq
from kiq.cli import main
from kiq.contrib.tracking_http import Resource, wsgi_app
from kiq.plugins import workflow
from kiq.plugins.tracking import Tracker
from kiq.plugins.workflow import chord
from tests.jobs.workflow import Add, Const, Mul, Price, Scale, Total

from .conftest import drain


@pytest.fixture
def tracking_db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tracking.db'}"  # workflows live in Redis: one database kind is enough


def test_kiq_workflows_lists_the_newest_and_shows_one(config: kiq.Config, capsys: pytest.CaptureFixture[str]) -> None:
    assert config.redis_url is not None
    url = ["--redis-url", config.redis_url]
    first = (Add.s(1, 2) | Mul.s(2)).perform_async()
    drain(config)
    second = chord([Const.s(1), Const.s(2)], Total.s()).perform_async()
    assert main(["workflows", *url]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split() == ["ID", "STATE", "STEPS", "DONE", "CREATED"]
    rows = [line.split() for line in lines]
    assert [(row[0], row[1], row[2]) for row in rows] == [(second.id, "running", "0/3"), (first.id, "succeeded", "2/2")]
    assert main(["workflows", second.id, *url]) == 0
    shown = capsys.readouterr().out
    assert "0.1" in shown and "WfTotal" in shown and "waiting" in shown
    assert main(["workflows", first.id, "--json", *url]) == 0
    details = json.loads(capsys.readouterr().out)
    assert (details["state"], details["result"], [s["result"] for s in details["steps"]]) == ("succeeded", 6, [3, 6])
    assert main(["workflows", "nosuchworkflow", *url]) == 1
    assert main(["workflows", "not an id", *url]) == 2


def test_get_workflows_answers_the_status_after_the_authorize_hook(config: kiq.Config, tracker: Tracker) -> None:
    wf = (Add.s(1, 2) | Mul.s(2)).perform_async()
    drain(config)
    asked: list[Resource] = []

    def authorize(request: Any, resource: Resource) -> bool:
        asked.append(resource)
        return resource.id == wf.id

    for hook in (None, authorize):
        http = httpx.Client(transport=httpx.WSGITransport(app=wsgi_app(tracker, hook)), base_url="http://t")
        answer = http.get(f"/workflows/{wf.id}")
        assert answer.status_code == 200
        body = answer.json()
        assert (body["id"], body["state"], body["result"]) == (wf.id, "succeeded", 6)
        assert [(s["step"], s["after"], s["state"]) for s in body["steps"]] == [
            ("0", [], "succeeded"),
            ("1", ["0"], "succeeded"),
        ]
    assert asked == [Resource("workflow", wf.id, None)]
    open_http = httpx.Client(transport=httpx.WSGITransport(app=wsgi_app(tracker)), base_url="http://t")
    assert open_http.get("/workflows/unknown").status_code == 404
    assert open_http.get("/workflows/not%20an%20id").status_code == 400


def test_the_asyncio_start_and_reads(config: kiq.Config) -> None:
    async def start() -> workflow.Workflow:
        return await (Add.s(2, 3) | Mul.s(4)).aio.perform_async()

    wf = asyncio.run(start())
    assert asyncio.run(wf.aio.status()).state == "running"  # type: ignore[union-attr]
    drain(config)

    async def read() -> tuple[Any, Any, Any]:
        return (
            await wf.aio.result(wait=1),
            await workflow.aio.status(wf.id),
            await workflow.aio.workflows(limit=5),
        )

    value, found, page = asyncio.run(read())
    assert value == 20 and found is not None and found.state == "succeeded" and page.ids == [wf.id]


def test_workflows_pages_newest_first(config: kiq.Config) -> None:
    ids = [workflow.group([Const.si(n)]).perform_async().id for n in range(5)]
    first = workflow.workflows(limit=3)
    assert first.ids == ids[::-1][:3] and first.cursor is not None
    rest = workflow.workflows(limit=3, cursor=first.cursor)
    assert rest.ids == ids[::-1][3:] and rest.cursor is None
    with pytest.raises(ValueError, match="cursor"):
        workflow.workflows(cursor="x")


def test_a_result_waits_and_says_when_there_is_none(config: kiq.Config) -> None:
    wf = (Add.s(1, 2) | Mul.s(2)).perform_async()
    with pytest.raises(workflow.WorkflowPending, match="still running"):
        wf.result(wait=0.05)
    with pytest.raises(workflow.WorkflowPending, match="never made"):
        workflow.result("nosuchworkflow")
    assert workflow.status("nosuchworkflow") is None


def test_typed_arguments_convert_and_are_checked_at_the_start(config: kiq.Config) -> None:
    wf = (Const.si(3) | Price.s(decimal.Decimal("1.25"))).perform_async()
    typed_first = (Const.si("2.5") | Scale.s(2)).perform_async()  # the given value is converted in the worker
    drain(config)
    assert wf.result() == "3.75"
    assert typed_first.result() == "5.0"
    with pytest.raises(workflow.WorkflowError, match=r"workflow step 1 .*WfPrice|workflow step 1 Price") as refused:
        (Const.si(3) | Price.s(object())).perform_async()
    assert "unit" in str(refused.value) or "args[1]" in str(refused.value)
