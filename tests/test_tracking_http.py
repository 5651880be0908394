"""The tracking HTTP endpoints: the same answers from the WSGI app, the ASGI app, and both mounted in FastAPI
and Flask; 200 for good input, 404 for unknown ids, 400 for malformed ones, 503 without a database, no 500."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import fastapi
import flask
import httpx
import pytest

import kiq
from kiq.contrib.fastapi import mount_tracking as mount_fastapi
from kiq.contrib.flask import mount_tracking as mount_flask
from kiq.contrib.tracking_http import asgi_app, wsgi_app
from kiq.plugins.tracking import Tracker
from tests.jobs.tracking import Enroll

from .tracking_support import track, work_off

Get = Callable[[str], httpx.Response]
APPS = ["wsgi", "asgi", "fastapi", "flask"]


def client_for(kind: str, tracker: Tracker) -> Get:
    """GET through the app ``kind``, mounted at /tracking for the framework adapters."""
    if kind == "wsgi":
        wsgi = httpx.Client(transport=httpx.WSGITransport(app=wsgi_app(tracker)), base_url="http://t")
        return wsgi.get
    if kind == "flask":
        app = flask.Flask("tracking-test")
        mount_flask(app, "/tracking", tracker)
        mounted = httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://t")
        return lambda path: mounted.get("/tracking" + path)
    if kind == "fastapi":
        api = fastapi.FastAPI()
        mount_fastapi(api, "/tracking", tracker)
        app, prefix = api, "/tracking"
    else:
        app, prefix = asgi_app(tracker), ""

    def get(path: str) -> httpx.Response:
        async def fetch() -> httpx.Response:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                return await client.get(prefix + path)

        return asyncio.run(fetch())

    return get


@pytest.fixture
def tracking_db_url(tmp_path: Path) -> str:
    """The HTTP layer does not depend on the database kind: SQLite only (test_tracking.py covers PostgreSQL)."""
    return f"sqlite:///{tmp_path / 'tracking.db'}"


@pytest.fixture(params=APPS)
def get(request: pytest.FixtureRequest, tracker: Tracker) -> Get:
    return client_for(request.param, tracker)


def test_good_requests_answer_200_with_the_task(config: kiq.Config, tracker: Tracker, get: Get) -> None:
    task_id = tracker.create_task(Enroll, [[1, "ok"], [2, "fail"]], name="two")
    other = tracker.create_task(Enroll, [[3]])
    work_off(config)
    tracker.writer.flush()

    task = get(f"/tasks/{task_id}")
    assert task.status_code == 200 and task.headers["content-type"] == "application/json"
    body = task.json()
    assert (body["name"], body["total"], body["done"], body["complete"]) == ("two", 2, 2, True)
    assert body["counts"]["finished"] == 1 and body["counts"]["failed"] == 1
    assert [event["status"] for event in body["events"]] == ["finished", "failed"]
    assert "events" not in get(f"/tasks/{task_id}?events=0").json()

    many = get(f"/tasks?ids={task_id},{'a' * 32},{other}").json()
    assert [t["id"] for t in many["tasks"]] == [task_id, other] and many["missing"] == ["a" * 32]

    changes = get(f"/tasks/{task_id}/events?since=0&limit=1").json()
    assert len(changes["events"]) == 1 and changes["more"]
    rest = get(f"/tasks/{task_id}/events?since={changes['cursor']}").json()
    assert len(rest["events"]) == 1 and not rest["more"]

    jid = body["events"][0]["job_id"]
    assert get(f"/jobs/{jid}").json()["task_id"] == task_id
    page = get(f"/tasks/{task_id}/page")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert f'data-task="{task_id}"' in page.text


@pytest.mark.parametrize(
    "path",
    ["/tasks/{unknown}", "/tasks/{unknown}/events?since=0", "/tasks/{unknown}/page", "/jobs/0123456789abcdef01234567",
     "/nothing/here", "/tasks/{task}/other"],
)  # fmt: skip
def test_unknown_ids_and_paths_answer_404(tracker: Tracker, get: Get, path: str) -> None:
    task_id = tracker.create_task(Enroll.set(queue="nowhere"), [[1]])
    response = get(path.format(unknown="b" * 32, task=task_id))
    assert response.status_code == 404 and "error" in response.json()


@pytest.mark.parametrize(
    "path",
    ["/tasks/not-an-id", "/tasks/" + "A" * 32, "/tasks/" + "a" * 33, "/tasks/%00", "/tasks/{task}/events?since=-1",
     "/tasks/{task}/events?since=abc", "/tasks/{task}/events?since=99999999999999999999999",
     "/tasks/{task}/events?limit=0", "/tasks/{task}/events?limit=1000000", "/tasks", "/tasks?ids=",
     "/tasks?ids={task},nope", "/tasks?ids=" + ",".join(["c" * 32] * 101), "/jobs/" + "x" * 65, "/jobs/a%20b"],
)  # fmt: skip
def test_malformed_input_answers_400(tracker: Tracker, get: Get, path: str) -> None:
    task_id = tracker.create_task(Enroll.set(queue="nowhere"), [[1]])
    response = get(path.format(task=task_id))
    assert response.status_code == 400, response.text
    assert "error" in response.json()


@pytest.mark.parametrize("kind", APPS)
def test_an_unreachable_database_answers_503(config: kiq.Config, tmp_path: Path, kind: str) -> None:
    tracker = track(config, f"sqlite:///{tmp_path}/missing-dir/tracking.db")
    get = client_for(kind, tracker)
    response = get("/tasks/" + "d" * 32)
    assert response.status_code == 503 and response.json() == {"error": "the tracking database is unavailable"}


def test_other_methods_answer_405(tracker: Tracker) -> None:
    client = httpx.Client(transport=httpx.WSGITransport(app=wsgi_app(tracker)), base_url="http://t")
    assert client.post("/tasks/" + "e" * 32).status_code == 405
