"""The dashboard mounted at a prefix in the four host frameworks: FastAPI and Starlette (``mount_web``, a route's
``Mount``), Flask (``mount_web``) and Django (``dashboard_urls``, staff only). Its pages answer, every link, form
action and asset stays under the prefix, its forms work through the adapter (the CSRF cookie is the prefix's),
and the ``authorize`` hook gets the framework's own request, with the host app's session."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit

import fastapi
import flask
import httpx
import pytest
import redis
import starlette.requests
from starlette.applications import Starlette
from starlette.middleware.sessions import SessionMiddleware
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

import kiq
from kiq.contrib.fastapi import mount_web as mount_asgi
from kiq.contrib.flask import mount_web as mount_flask
from kiq.contrib.web import Request, asgi_app

from .http_support import (
    add_metrics,
    add_process,
    enqueue,
    entry_key,
    failed,
    job,
    parse,
    private_config,
    queued_jids,
    set_jids,
)

pytest_plugins = ["tests.contrib.django_support"]

KINDS = ["fastapi", "starlette", "flask", "django"]
PREFIXES = {"fastapi": "/kiq", "starlette": "/kiq", "flask": "/kiq", "django": "/admin/kiq/dashboard"}
DIED = float(int(time.time()) - 3600)
DEAD_KEY = entry_key(DIED, "dead-1")


@pytest.fixture
def e2e_config(one_redis_url: str, django_project: Path) -> Iterator[kiq.Config]:
    """The dashboard's config, on a database of these tests' own (see http_support). Django is set up before it
    is made: setting Django up applies the test project's settings.KIQ to the default config of the moment."""
    yield from private_config(one_redis_url)


@pytest.fixture
def r(e2e_config: kiq.Config) -> redis.Redis:
    """Something on every page: a queue long enough for a second page, a job in each sorted set, a process, a job
    class's metrics."""
    connection = e2e_config.redis
    enqueue(connection, "alpha", *(job(f"alpha-{n}", queue="alpha") for n in range(30)))
    connection.zadd("dead", {json.dumps(failed("dead-1")): DIED, json.dumps(failed("dead-2")): DIED + 1})
    connection.zadd("retry", {json.dumps(failed("retry-1")): time.time() + 3600})
    connection.zadd("schedule", {json.dumps(job("sched-1")): time.time() + 3600})
    add_process(connection, "web-host:4242:0123abcd")
    add_metrics(connection, "Greet")
    return connection


@dataclass
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names
    text: str


class Site(Protocol):
    """A host app with the dashboard mounted at ``prefix``, and a client of it that keeps its cookies."""

    prefix: str
    origin: str

    def get(self, path: str) -> Reply: ...

    def post(self, path: str, fields: list[tuple[str, str]], origin: str | None = None) -> Reply: ...


def reply(response: httpx.Response) -> Reply:
    return Reply(response.status_code, {name.lower(): value for name, value in response.headers.items()},
                 response.text)  # fmt: skip


def form_request(fields: list[tuple[str, str]], origin: str) -> dict[str, Any]:
    """The keyword arguments of an httpx request that posts ``fields`` as a browser does from ``origin``."""
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": origin}
    return {"content": urlencode(fields).encode(), "headers": headers}


@dataclass
class WsgiSite:
    """A Flask app, through httpx's WSGI transport."""

    client: httpx.Client
    prefix: str
    origin: str

    def get(self, path: str) -> Reply:
        return reply(self.client.get(path))

    def post(self, path: str, fields: list[tuple[str, str]], origin: str | None = None) -> Reply:
        return reply(self.client.post(path, **form_request(fields, origin or self.origin)))


@dataclass
class AsgiSite:
    """A Starlette or FastAPI app, through httpx's ASGI transport (one event loop per request; the cookies kept
    between them)."""

    app: Any
    prefix: str
    origin: str = "http://testserver"
    cookies: httpx.Cookies = field(default_factory=httpx.Cookies)

    def get(self, path: str) -> Reply:
        return self._send("GET", path)

    def post(self, path: str, fields: list[tuple[str, str]], origin: str | None = None) -> Reply:
        return self._send("POST", path, **form_request(fields, origin or self.origin))

    def _send(self, method: str, path: str, **options: Any) -> Reply:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url=self.origin, cookies=self.cookies) as client:
                response = await client.request(method, path, **options)
                self.cookies = client.cookies
                return response

        return reply(asyncio.run(send()))


@dataclass
class DjangoSite:
    """The test project (tests/contrib/django_project) through Django's test client, signed in as ``user``."""

    client: Any  # django.test.Client
    prefix: str = PREFIXES["django"]
    origin: str = "http://testserver"

    def get(self, path: str) -> Reply:
        return self._reply(self.client.get(path))

    def post(self, path: str, fields: list[tuple[str, str]], origin: str | None = None) -> Reply:
        answer = self.client.post(path, data=urlencode(fields), content_type="application/x-www-form-urlencoded",
                                  headers={"Origin": origin or self.origin, "Host": "testserver"})  # fmt: skip
        return self._reply(answer)

    @staticmethod
    def _reply(response: Any) -> Reply:
        headers = {name.lower(): value for name, value in response.headers.items()}
        for morsel in response.cookies.values():  # sent as Set-Cookie headers by Django's handlers
            headers["set-cookie"] = morsel.OutputString()
        return Reply(response.status_code, headers, response.content.decode())


def session_login(app: Any) -> None:
    """``/login`` marks the session as staff's (what an app's login view does)."""
    if isinstance(app, flask.Flask):
        app.add_url_rule("/login", "login", flask_login)
    else:
        app.add_route("/login", starlette_login)


def flask_login() -> str:
    flask.session["staff"] = True
    return "ok"


async def starlette_login(request: starlette.requests.Request) -> PlainTextResponse:
    request.session["staff"] = True
    return PlainTextResponse("ok")


def make_site(kind: str, config: kiq.Config, authorize: Callable[[Request], bool] | None = None) -> Site:
    """The dashboard of ``config`` mounted in a ``kind`` app (with a session and a /login, for the hook)."""
    if kind == "flask":
        app = flask.Flask("kiq-web-test")
        app.secret_key = "test only"
        session_login(app)
        mount_flask(app, "/kiq", config=config, authorize=authorize)
        client = httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://flask.test")
        return WsgiSite(client, "/kiq", "http://flask.test")
    if kind == "fastapi":
        api = fastapi.FastAPI()
        mount_asgi(api, "/kiq", config=config, authorize=authorize)
        host: Any = api
    elif authorize is None:  # a Starlette app that declares the mount in its routes
        host = Starlette(routes=[Route("/", PlainTextResponse("home")), Mount("/kiq", app=asgi_app(config))])
    else:
        host = Starlette()
        mount_asgi(host, "/kiq", config=config, authorize=authorize)
    session_login(host)
    host.add_middleware(SessionMiddleware, secret_key="test only")
    return AsgiSite(host, "/kiq")


@pytest.fixture
def django_dashboard(
    e2e_config: kiq.Config, django_project: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[bool], Site]]:
    """``signed_in(staff)`` -> the test project, its dashboard on this test's Redis, with a signed-in user.

    The Django view makes its dashboard once, from the project's settings and the environment (KIQ_REDIS_URL):
    the test's Redis is given there, and the view's dashboard made again for it."""
    from django.contrib.auth.models import User
    from django.test import Client

    from kiq.contrib.django import views

    assert e2e_config.redis_url is not None
    monkeypatch.setenv("KIQ_REDIS_URL", e2e_config.redis_url)
    views._dashboard.cache_clear()

    def signed_in(staff: bool) -> Site:
        client = Client()
        client.force_login(User.objects.create(username=f"user-{secrets.token_hex(4)}", is_staff=staff))
        return DjangoSite(client)

    yield signed_in
    views._dashboard.cache_clear()


@pytest.fixture(params=KINDS)
def site(request: pytest.FixtureRequest, e2e_config: kiq.Config, r: redis.Redis) -> Site:
    if request.param == "django":
        signed_in: Callable[[bool], Site] = request.getfixturevalue("django_dashboard")
        return signed_in(True)
    return make_site(request.param, e2e_config)


PAGES = ["", "busy", "queues", "queues/alpha", "queues/alpha?page=2", "retries", "scheduled", "dead",
         f"dead/{DEAD_KEY}", "metrics", "metrics/Greet"]  # fmt: skip


def test_the_pages_answer_and_every_link_stays_under_the_prefix(site: Site) -> None:
    prefix = site.prefix
    followed: dict[str, int] = {}
    for path in PAGES:
        answer = site.get(f"{prefix}/{path}")
        assert answer.status == 200, (path, answer.status, answer.text[-300:])
        page = parse(answer.text)
        urls = page.urls()
        assert len(urls) > 10, path
        outside = [url for url in urls if not url.startswith(f"{prefix}/")]
        assert outside == [], (path, outside)
        assert f"{prefix}/static/kiq.css" in urls and f"{prefix}/static/kiq.js" in urls
        for link in page.links():
            if link not in followed:
                followed[link] = site.get(link).status
    assert {link for link, status in followed.items() if status != 200} == set()
    expected = {f"{prefix}/queues/alpha", f"{prefix}/queues/alpha?page=2", f"{prefix}/dead/{DEAD_KEY}",
                f"{prefix}/metrics/Greet?period=1h", f"{prefix}/busy", f"{prefix}/"}  # fmt: skip
    assert expected <= set(followed)
    for asset, kind in (("kiq.css", "text/css"), ("kiq.js", "text/javascript")):
        answer = site.get(f"{prefix}/static/{asset}")
        assert answer.status == 200 and answer.headers["content-type"].startswith(kind) and len(answer.text) > 100


def test_a_form_posts_through_the_adapter_with_the_cookie_of_the_prefix(site: Site, r: redis.Redis) -> None:
    prefix = site.prefix
    answer = site.get(f"{prefix}/dead")
    cookie = answer.headers["set-cookie"]
    assert "kiq_csrf=" in cookie and f"Path={prefix};" in cookie and "SameSite=Strict" in cookie
    page = parse(site.get(f"{prefix}/dead/{DEAD_KEY}").text)
    form = page.form(f"{prefix}/dead/{DEAD_KEY}", op="Retry now")
    without_token = [(name, value) for name, value in form.fields if name != "csrf"]
    assert site.post(form.action, without_token).status == 403
    assert site.post(form.action, form.fields, origin="http://evil.example").status == 403
    assert set_jids(r, "dead") == ["dead-1", "dead-2"]

    done = site.post(form.action, form.fields)
    assert done.status == 303, done.text
    location = done.headers["location"]
    assert urlsplit(location).path == f"{prefix}/dead"
    assert set_jids(r, "dead") == ["dead-2"] and queued_jids(r) == ["dead-1"]
    assert "dead-1" not in site.get(location).text

    # the selection form of the list, with its checkboxes: delete the other one
    listing = parse(site.get(f"{prefix}/dead").text)
    [selection] = [form for form in listing.post_forms() if form.id == "dead-selection"]
    listing.button("dead-selection", "delete")
    keys = [box["value"] or "" for box in listing.checkboxes if box.get("name") == "key"]
    assert keys == [entry_key(DIED + 1, "dead-2")]
    deleted = site.post(selection.action, [*selection.fields, ("action", "delete"), ("key", keys[0])])
    assert deleted.status == 303 and r.zcard("dead") == 0


# -- authorize ---------------------------------------------------------------------------------------------------
NATIVE = {"fastapi": starlette.requests.Request, "starlette": starlette.requests.Request, "flask": flask.Request}


@dataclass
class StaffSession:
    """An authorize hook that lets in the sessions /login marked as staff's, recording the requests' types."""

    types: set[type] = field(default_factory=set)

    def __call__(self, request: Request) -> bool:
        native = request.native
        self.types.add(type(native))
        if isinstance(native, flask.Request):
            assert native is flask.request._get_current_object()  # type: ignore[attr-defined]  # in its context
            return flask.session.get("staff") is True
        return isinstance(native, starlette.requests.Request) and native.session.get("staff") is True


@pytest.mark.parametrize("kind", ["fastapi", "starlette", "flask"])
def test_the_authorize_hook_gets_the_frameworks_request_and_session(
    kind: str, e2e_config: kiq.Config, r: redis.Redis
) -> None:
    hook = StaffSession()
    site = make_site(kind, e2e_config, hook)
    for path in ("", "queues", f"dead/{DEAD_KEY}", "static/kiq.js"):
        answer = site.get(f"/kiq/{path}")
        assert answer.status == 403 and "dead-1" not in answer.text, path
    assert site.get("/login").status == 200
    page = site.get(f"/kiq/dead/{DEAD_KEY}")
    assert page.status == 200 and "dead-1" in page.text
    form = parse(page.text).form(f"/kiq/dead/{DEAD_KEY}", op="Delete")
    assert site.post(form.action, form.fields).status == 303
    assert set_jids(r, "dead") == ["dead-2"]
    assert hook.types == {NATIVE[kind]}


def test_the_django_dashboard_is_for_staff_only(django_dashboard: Callable[[bool], Site], r: redis.Redis) -> None:
    from django.test import Client

    prefix = PREFIXES["django"]
    for path in ("", "dead", f"dead/{DEAD_KEY}", "static/kiq.css"):
        anonymous = Client().get(f"{prefix}/{path}")
        assert anonymous.status_code == 302, path
        assert anonymous["Location"].startswith(f"/admin/login/?next={prefix}/")
        refused = django_dashboard(False).get(f"{prefix}/{path}")
        assert refused.status == 403 and "dead-1" not in refused.text, path
        assert django_dashboard(True).get(f"{prefix}/{path}").status == 200, path
    # a POST from a user who is not staff, with a token and its cookie, changes nothing
    token = secrets.token_urlsafe(32)
    user = django_dashboard(False)
    assert isinstance(user, DjangoSite)
    user.client.cookies["kiq_csrf"] = token
    answer = user.post(f"{prefix}/dead", [("csrf", token), ("action", "delete_all")])
    assert answer.status == 403 and r.zcard("dead") == 2
