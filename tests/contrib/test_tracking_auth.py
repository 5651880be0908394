"""The ``authorize`` hook of the tracking endpoints, in the four app kinds: it is asked before any data leaves,
with the framework's own request (Flask's in a real request context, Starlette's carrying the host app's session
and user) and a Resource; denied → 403 and no data, allowed → 200, ``/tasks?ids=`` reports denied ids as
missing, a raising or undecided hook answers 403, and a jid alone never yields its task id."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastapi
import flask
import httpx
import pytest
import starlette.requests
from starlette.authentication import AuthCredentials, AuthenticationBackend, BaseUser, SimpleUser
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import HTTPConnection

import kiq
from kiq.contrib.fastapi import mount_tracking as mount_fastapi
from kiq.contrib.flask import mount_tracking as mount_flask
from kiq.contrib.tracking_http import Resource, WSGIRequest
from kiq.plugins.tracking import Tracker
from tests.jobs.tracking import Enroll
from tests.tracking_support import work_off

from .test_tracking_http import APPS, client_for

REQUEST_TYPES = {
    "wsgi": WSGIRequest,
    "asgi": starlette.requests.Request,
    "fastapi": starlette.requests.Request,
    "flask": flask.Request,
}


@pytest.fixture
def tracking_db_url(tmp_path: Path) -> str:
    """The HTTP layer does not depend on the database kind: SQLite only (test_tracking.py covers PostgreSQL)."""
    return f"sqlite:///{tmp_path / 'tracking.db'}"


@dataclass
class Tasks:
    mine: str
    theirs: str
    my_jid: str
    their_jid: str
    alone_jid: str  # a job tracked on its own: its event has no task


@pytest.fixture
def tasks(config: kiq.Config, tracker: Tracker) -> Tasks:
    mine = tracker.create_task(Enroll, [[1, "ok"]], name="mine")
    theirs = tracker.create_task(Enroll, [[2, "ok"]], name="theirs")
    alone = Enroll.set(track=True).perform_async(3)
    assert alone is not None
    work_off(config)
    tracker.writer.flush()
    my_task, their_task = tracker.task(mine), tracker.task(theirs)
    assert my_task is not None and their_task is not None
    return Tasks(mine, theirs, my_task["events"][0]["job_id"], their_task["events"][0]["job_id"], alone)


class Hook:
    """An authorize hook that allows what belongs to ``allowed`` task ids (and jobs without a task when
    ``alone`` is set), recording every call and the request type it was given."""

    def __init__(self, *allowed: str, alone: bool = False) -> None:
        self.allowed = set(allowed)
        self.alone = alone
        self.calls: list[Resource] = []
        self.request_types: set[type] = set()
        self.lock = threading.Lock()

    def __call__(self, request: Any, resource: Resource) -> bool:
        with self.lock:
            self.calls.append(resource)
            self.request_types.add(type(request))
        return resource.task_id in self.allowed if resource.task_id is not None else self.alone


@pytest.mark.parametrize("kind", APPS)
def test_a_denying_hook_answers_403_and_no_data(tracker: Tracker, tasks: Tasks, kind: str) -> None:
    hook = Hook()
    get = client_for(kind, tracker, hook)
    for path in (f"/tasks/{tasks.mine}", f"/tasks/{tasks.mine}?events=0", f"/tasks/{tasks.mine}/events?since=0",
                 f"/tasks/{tasks.mine}/page", f"/tasks/{tasks.mine}/page/", f"/jobs/{tasks.my_jid}",
                 f"/jobs/{tasks.alone_jid}", f"/tasks/{'b' * 32}", "/jobs/unknownjid"):  # fmt: skip
        response = get(path)
        assert response.status_code == 403, (path, response.text)
        assert response.json() == {"error": "not allowed"}
        assert response.headers["x-frame-options"] == "DENY"
    many = get(f"/tasks?ids={tasks.mine},{tasks.theirs}")
    assert many.status_code == 200 and many.json() == {"tasks": [], "missing": [tasks.mine, tasks.theirs]}
    assert hook.request_types == {REQUEST_TYPES[kind]}
    assert Resource("task", tasks.mine, tasks.mine) in hook.calls
    assert Resource("job", tasks.my_jid, tasks.mine) in hook.calls  # the hook learns the job's task, the client not
    assert Resource("job", tasks.alone_jid, None) in hook.calls


@pytest.mark.parametrize("kind", APPS)
def test_an_allowing_hook_answers_200_for_what_it_allows(tracker: Tracker, tasks: Tasks, kind: str) -> None:
    get = client_for(kind, tracker, Hook(tasks.mine, alone=True))
    task = get(f"/tasks/{tasks.mine}")
    assert task.status_code == 200 and task.json()["name"] == "mine"
    assert get(f"/tasks/{tasks.mine}/events?since=0").json()["events"][0]["job_id"] == tasks.my_jid
    assert get(f"/tasks/{tasks.mine}/page/").status_code == 200
    job = get(f"/jobs/{tasks.my_jid}")
    assert job.status_code == 200 and job.json()["task_id"] == tasks.mine  # allowed: it may say its task
    alone = get(f"/jobs/{tasks.alone_jid}")
    assert alone.status_code == 200 and alone.json()["task_id"] is None
    assert get("/jobs/unknownjid").status_code == 404

    assert get(f"/tasks/{tasks.theirs}").status_code == 403
    assert get(f"/jobs/{tasks.their_jid}").status_code == 403
    many = get(f"/tasks?ids={tasks.theirs},{tasks.mine},{'c' * 32}").json()
    assert [task["id"] for task in many["tasks"]] == [tasks.mine]
    assert many["missing"] == [tasks.theirs, "c" * 32]  # denied ids look like unknown ones


@pytest.mark.parametrize("kind", APPS)
def test_without_a_hook_a_jid_does_not_give_its_task_id(tracker: Tracker, tasks: Tasks, kind: str) -> None:
    job = client_for(kind, tracker)(f"/jobs/{tasks.my_jid}")
    assert job.status_code == 200 and job.json()["status"] == "finished"
    assert "task_id" not in job.json() and tasks.mine not in job.text


@pytest.mark.parametrize("kind", APPS)
def test_a_raising_or_undecided_hook_answers_403_and_is_logged(
    tracker: Tracker, tasks: Tasks, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    def raising(request: Any, resource: Resource) -> bool:
        raise LookupError("no such user")

    async def undecided(request: Any, resource: Resource) -> bool:  # async: its coroutine decides nothing
        return True

    for hook, logged in ((raising, "no such user"), (undecided, "not a bool")):
        with caplog.at_level(logging.ERROR, "kiq.tracking"):
            response = client_for(kind, tracker, hook)(f"/tasks/{tasks.mine}")  # type: ignore[arg-type]
        assert response.status_code == 403 and tasks.mine not in response.text
        assert logged in caplog.text
        caplog.clear()


# -- the host framework's own authentication reaches the hook ------------------------------------------
OWNERS = {"alice": "mine", "bob": "theirs"}  # who may read which task (by name)


def owns(user: str | None, task_name: str | None) -> bool:
    return user is not None and OWNERS.get(user) == task_name


@pytest.fixture
def task_names(tracker: Tracker, tasks: Tasks) -> dict[str, str]:
    return {tasks.mine: "mine", tasks.theirs: "theirs"}


def test_flask_hooks_see_the_apps_session_and_g(tracker: Tracker, tasks: Tasks, task_names: dict[str, str]) -> None:
    app = flask.Flask("host")
    app.secret_key = "test only"

    @app.get("/login/<user>")
    def login(user: str) -> str:
        flask.session["user"] = user
        return "ok"

    @app.before_request
    def load_user() -> None:  # what Flask-Login and the like do: the user of the session, on g
        flask.g.user = flask.session.get("user")

    def authorize(request: flask.Request, resource: Resource) -> bool:
        assert request is flask.request._get_current_object()  # type: ignore[attr-defined]  # a real context
        return owns(flask.g.user, task_names.get(resource.task_id or ""))

    mount_flask(app, "/tracking", tracker, authorize)
    with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://t") as client:
        assert client.get(f"/tracking/tasks/{tasks.mine}").status_code == 403  # nobody logged in
        assert client.get("/login/alice").status_code == 200
        assert client.get(f"/tracking/tasks/{tasks.mine}").status_code == 200
        assert client.get(f"/tracking/jobs/{tasks.my_jid}").json()["task_id"] == tasks.mine
        assert client.get(f"/tracking/tasks/{tasks.theirs}").status_code == 403
        assert client.get(f"/tracking/jobs/{tasks.their_jid}").status_code == 403
        client.get("/login/bob")
        assert client.get(f"/tracking/tasks/{tasks.theirs}").status_code == 200
        assert client.get(f"/tracking/tasks/{tasks.mine}").status_code == 403


class SessionUser(AuthenticationBackend):
    """Starlette authentication from the session (as an app's login would set it)."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        user = conn.session.get("user")
        return (AuthCredentials(["authenticated"]), SimpleUser(user)) if user else None


def test_fastapi_hooks_see_the_apps_authenticated_user(
    tracker: Tracker, tasks: Tasks, task_names: dict[str, str]
) -> None:
    api = fastapi.FastAPI()

    @api.get("/login/{user}")
    def login(user: str, request: fastapi.Request) -> str:
        request.session["user"] = user
        return "ok"

    def authorize(request: starlette.requests.Request, resource: Resource) -> bool:
        user = request.user.display_name if request.user.is_authenticated else None
        return owns(user, task_names.get(resource.task_id or ""))

    mount_fastapi(api, "/tracking", tracker, authorize)
    api.add_middleware(AuthenticationMiddleware, backend=SessionUser())
    api.add_middleware(SessionMiddleware, secret_key="test only")  # added last: outermost, as it must be

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://t") as client:
            assert (await client.get(f"/tracking/tasks/{tasks.mine}")).status_code == 403  # nobody logged in
            assert (await client.get("/login/alice")).status_code == 200
            assert (await client.get(f"/tracking/tasks/{tasks.mine}")).status_code == 200
            assert (await client.get(f"/tracking/jobs/{tasks.my_jid}")).json()["task_id"] == tasks.mine
            assert (await client.get(f"/tracking/tasks/{tasks.theirs}")).status_code == 403
            many = (await client.get(f"/tracking/tasks?ids={tasks.mine},{tasks.theirs}")).json()
            assert [task["id"] for task in many["tasks"]] == [tasks.mine] and many["missing"] == [tasks.theirs]
            await client.get("/login/bob")
            assert (await client.get(f"/tracking/tasks/{tasks.theirs}")).status_code == 200
            assert (await client.get(f"/tracking/tasks/{tasks.mine}")).status_code == 403

    asyncio.run(scenario())
