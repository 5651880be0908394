"""The tracking HTTP endpoints: the same answers from the WSGI app, the ASGI app, and both mounted in FastAPI
and Flask; 200 for good input, 404 for unknown ids, 400 for malformed ones, 405 for other methods, 503 without a
database, no 500; the security headers on every answer. (Authorization: test_tracking_auth.py.)"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any, Protocol

import fastapi
import flask
import httpx
import pytest

import kiq
from kiq.contrib.fastapi import mount_tracking as mount_fastapi
from kiq.contrib.flask import mount_tracking as mount_flask
from kiq.contrib.tracking_http import Authorize, asgi_app, wsgi_app
from kiq.plugins.tracking import Tracker
from tests.jobs.tracking import Enroll
from tests.tracking_support import track, work_off

APPS = ["wsgi", "asgi", "fastapi", "flask"]


class Get(Protocol):
    def __call__(self, path: str, method: str = "GET") -> httpx.Response: ...


def client_for(kind: str, tracker: Tracker, authorize: Authorize[Any] | None = None) -> Get:
    """Requests through the app ``kind``, mounted at /tracking for the framework adapters."""
    if kind in ("wsgi", "flask"):
        if kind == "wsgi":
            wsgi, prefix = wsgi_app(tracker, authorize), ""
        else:
            wsgi, prefix = flask.Flask("tracking-test"), "/tracking"
            mount_flask(wsgi, prefix, tracker, authorize)
        client = httpx.Client(transport=httpx.WSGITransport(app=wsgi), base_url="http://t")
        return lambda path, method="GET": client.request(method, prefix + path)
    if kind == "fastapi":
        api = fastapi.FastAPI()
        mount_fastapi(api, "/tracking", tracker, authorize)
        app, prefix = api, "/tracking"
    else:
        app, prefix = asgi_app(tracker, authorize), ""

    def request(path: str, method: str = "GET") -> httpx.Response:
        async def fetch() -> httpx.Response:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                return await client.request(method, prefix + path)

        return asyncio.run(fetch())

    return request


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
    job = get(f"/jobs/{jid}")
    assert job.status_code == 200 and job.json()["status"] == "finished"
    assert "task_id" not in job.json()  # without an authorize hook a jid does not lead to its task
    for path in (f"/tasks/{task_id}/page", f"/tasks/{task_id}/page/"):
        page = get(path)
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


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
def test_other_methods_answer_405_with_allow(tracker: Tracker, get: Get, method: str) -> None:
    task_id = tracker.create_task(Enroll.set(queue="nowhere"), [[1]])
    response = get(f"/tasks/{task_id}", method)
    assert response.status_code == 405 and response.headers["allow"] == "GET, HEAD"
    assert response.json() == {"error": "only GET and HEAD are supported"}


def test_head_answers_the_headers_of_get_without_a_body(tracker: Tracker, get: Get) -> None:
    task_id = tracker.create_task(Enroll.set(queue="nowhere"), [[1]])
    head, full = get(f"/tasks/{task_id}", "HEAD"), get(f"/tasks/{task_id}")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(full.content))


SECURITY_HEADERS = {"x-content-type-options": "nosniff", "x-frame-options": "DENY", "referrer-policy": "no-referrer"}
JSON_POLICY = "default-src 'none'; frame-ancestors 'none'"


def test_every_answer_carries_the_security_headers(tracker: Tracker, get: Get) -> None:
    task_id = tracker.create_task(Enroll.set(queue="nowhere"), [[1]])
    answers = {
        200: get(f"/tasks/{task_id}"),
        400: get("/tasks/nope"),
        404: get("/tasks/" + "b" * 32),
        405: get(f"/tasks/{task_id}", "POST"),
    }
    for status, response in answers.items():
        assert response.status_code == status
        assert {name: response.headers.get(name) for name in SECURITY_HEADERS} == SECURITY_HEADERS
        assert response.headers["content-security-policy"] == JSON_POLICY


def test_the_page_allows_only_its_own_nonced_script_and_style(tracker: Tracker, get: Get) -> None:
    task_id = tracker.create_task(Enroll.set(queue="nowhere"), [[1]])
    pages = [get(f"/tasks/{task_id}/page"), get(f"/tasks/{task_id}/page/")]
    nonces = []
    for page in pages:
        assert {name: page.headers.get(name) for name in SECURITY_HEADERS} == SECURITY_HEADERS
        policy = dict(
            directive.strip().split(" ", 1) for directive in page.headers["content-security-policy"].split(";")
        )
        nonce = re.fullmatch(r"'nonce-([A-Za-z0-9_-]{20,})'", policy["script-src"])
        assert nonce, policy
        nonces.append(nonce.group(1))
        assert policy == {
            "default-src": "'none'",
            "script-src": f"'nonce-{nonce.group(1)}'",
            "style-src": f"'nonce-{nonce.group(1)}'",
            "connect-src": "'self'",
            "base-uri": "'none'",
            "form-action": "'none'",
            "frame-ancestors": "'none'",
        }
        # the page's one script and one style carry it (tests/contrib/test_tracking_page.py: no violation in Chromium)
        assert re.findall(r"<(script|style)([^>]*)>", page.text) == [
            ("style", f' nonce="{nonce.group(1)}"'),
            ("script", f' nonce="{nonce.group(1)}"'),
        ]
    assert nonces[0] != nonces[1]  # a new one in every response
