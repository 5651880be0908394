"""The dashboard's defences, over real HTTP (no browser): every action needs the double-submit CSRF token from the
dashboard's own origin, GET changes nothing, read-only mode shows no button and refuses every POST, the
``authorize`` hook decides who gets in, what Redis holds is escaped on every page, the Content-Security-Policy
allows no inline script, an unreachable Redis answers 503 pages, and ``kiq web`` guards itself with a password or a
token, binds loopback, and stops on SIGTERM."""

from __future__ import annotations

import base64
import json
import logging
import re
import secrets
import signal
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

import kiq
import kiq.contrib.web
from kiq.contrib.web import Request
from kiq.iteration import state as iteration_state

from .http_support import (
    ESCAPED_SCRIPT,
    MARKUP,
    Document,
    add_metrics,
    add_process,
    enqueue,
    entry_key,
    failed,
    job,
    kiq_web,
    parse,
    post_form,
    private_config,
    queued_jids,
    set_jids,
    snapshot,
)

Dashboard = Callable[..., str]  # the conftest's fixture: dashboard(read_only=..., authorize=..., config=...) -> URL

FUTURE = float(int(time.time()) + 365 * 86_400)  # retries and scheduled jobs are due then: no poller moves them
PAST = float(int(time.time()) - 86_400)  # the dead died then (recent: killing trims entries older than 6 months)
IDENTITY = "web-host:4242:0123abcd"
OTHER = "web-host:4343:4567ef01"
RETRIES = [(FUTURE + 100.5, "retry-1"), (FUTURE + 200.5, "retry-2")]
SCHEDULED = [(FUTURE + 100.25, "sched-1"), (FUTURE + 200.25, "sched-2")]
DEAD = [(PAST + 1.5, "dead-1"), (PAST + 2.5, "dead-2")]
RETRY_KEY, SCHEDULED_KEY, DEAD_KEY = (entry_key(*entries[0]) for entries in (RETRIES, SCHEDULED, DEAD))
EVIL_ORIGINS = ("http://evil.example", "null")
RUNNING_ITERABLE = "iter-1"


@pytest.fixture
def e2e_config(one_redis_url: str) -> Iterator[kiq.Config]:
    """The dashboard's config (its fixture's), on a database of these tests' own (see http_support)."""
    yield from private_config(one_redis_url)


@pytest.fixture
def r(e2e_config: kiq.Config) -> redis.Redis:
    """The dashboard's Redis, with a queue, two entries in each sorted set, two live processes and a job class's
    metrics."""
    connection = e2e_config.redis
    enqueue(connection, "alpha", *(job(f"alpha-{n}", queue="alpha") for n in (1, 2, 3)))
    enqueue(connection, "beta", job("beta-1", queue="beta"))
    kiq.Queue("beta", e2e_config).pause()
    for name, entries in (("retry", RETRIES), ("schedule", SCHEDULED), ("dead", DEAD)):
        make = job if name == "schedule" else failed
        connection.zadd(name, {json.dumps(make(jid)): score for score, jid in entries})
    add_process(connection, IDENTITY, work={"1": job(RUNNING_ITERABLE)})
    add_process(connection, OTHER)
    add_metrics(connection, "Greet")
    for jid in (RUNNING_ITERABLE, "retry-1"):  # an iterable job running, and one waiting for its retry
        iteration_state.flush(connection, jid, 2, {"row": 400}, 12.5)
    return connection


# -- the actions -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Action:
    id: str
    page: str  # the page that offers it (below the dashboard)
    target: str  # where its form posts
    pick: dict[str, str]  # hidden fields that tell its form from the page's others ({}: the page's selection form)
    extra: tuple[tuple[str, str], ...]  # what the pressed button and the ticked boxes add
    done: Callable[[redis.Redis], None]  # asserts what it did


def signals(r: redis.Redis, identity: str) -> list[str]:
    return [str(name) for name in r.lrange(f"{identity}-signals", 0, -1)]


def moved(
    name: str, gone: str, kept: list[str], queued: list[str], dead: list[str] | None = None
) -> Callable[..., None]:
    """An effect on the sorted set ``name``: ``gone`` left it, ``kept`` stayed, ``queued`` are in the default
    queue now, and the dead set holds ``dead`` (when given)."""

    def check(r: redis.Redis) -> None:
        assert set_jids(r, name) == kept, (gone, set_jids(r, name))
        assert sorted(queued_jids(r)) == queued
        if dead is not None:
            assert set_jids(r, "dead") == dead

    return check


def selection(kind: str, action: str, *keys: str) -> tuple[tuple[str, str], ...]:
    return (("action", action), *(("key", key) for key in keys))


def queue_cleared(r: redis.Redis) -> None:
    assert r.llen("queue:alpha") == 0 and not r.sismember("queues", "alpha")


def paused_queues(*names: str) -> Callable[[redis.Redis], None]:
    def check(r: redis.Redis) -> None:
        assert r.smembers("kiq:paused") == set(names)

    return check


def queue_job_deleted(r: redis.Redis) -> None:
    assert queued_jids(r, "alpha") == ["alpha-3", "alpha-1"]


def cancelled(jid: str) -> Callable[[redis.Redis], None]:
    def check(r: redis.Redis) -> None:
        state = iteration_state.read(r, jid)
        assert state is not None and state.cancelled and state.executions == 2  # marked; the job's own state kept
        assert set_jids(r, "retry") == ["retry-1", "retry-2"]  # nothing else moved

    return check


def signalled(name: str, *identities: str) -> Callable[[redis.Redis], None]:
    def check(r: redis.Redis) -> None:
        for identity in (IDENTITY, OTHER):
            assert signals(r, identity) == ([name] if identity in identities else []), identity

    return check


ALL_DEAD = ["dead-1", "dead-2"]
ACTIONS = [
    Action("queue-clear", "queues", "queues/alpha", {"op": "clear"}, (), queue_cleared),
    Action("queue-pause", "queues", "queues/alpha", {"op": "pause"}, (), paused_queues("alpha", "beta")),
    Action("queue-unpause", "queues", "queues/beta", {"op": "unpause"}, (), paused_queues()),
    Action("queue-page-pause", "queues/alpha", "queues/alpha", {"op": "pause"}, (), paused_queues("alpha", "beta")),
    Action("queue-delete-job", "queues/alpha", "queues/alpha", {"op": "delete", "jid": "alpha-2"}, (),
           queue_job_deleted),
    Action("retries-retry-selected", "retries", "retries", {}, selection("retries", "retry_now", RETRY_KEY),
           moved("retry", "retry-1", ["retry-2"], ["retry-1"], ALL_DEAD)),
    Action("retries-delete-selected", "retries", "retries", {}, selection("retries", "delete", RETRY_KEY),
           moved("retry", "retry-1", ["retry-2"], [], ALL_DEAD)),
    Action("retries-kill-selected", "retries", "retries", {}, selection("retries", "kill", RETRY_KEY),
           moved("retry", "retry-1", ["retry-2"], [], [*ALL_DEAD, "retry-1"])),
    Action("retries-retry-all", "retries", "retries", {}, selection("retries", "retry_all"),
           moved("retry", "all", [], ["retry-1", "retry-2"], ALL_DEAD)),
    Action("retries-delete-all", "retries", "retries", {}, selection("retries", "delete_all"),
           moved("retry", "all", [], [], ALL_DEAD)),
    Action("retries-kill-all", "retries", "retries", {}, selection("retries", "kill_all"),
           moved("retry", "all", [], [], [*ALL_DEAD, "retry-1", "retry-2"])),
    Action("retry-page-retry", f"retries/{RETRY_KEY}", f"retries/{RETRY_KEY}", {"op": "Retry now"}, (),
           moved("retry", "retry-1", ["retry-2"], ["retry-1"], ALL_DEAD)),
    Action("retry-page-delete", f"retries/{RETRY_KEY}", f"retries/{RETRY_KEY}", {"op": "Delete"}, (),
           moved("retry", "retry-1", ["retry-2"], [], ALL_DEAD)),
    Action("retry-page-kill", f"retries/{RETRY_KEY}", f"retries/{RETRY_KEY}", {"op": "Kill"}, (),
           moved("retry", "retry-1", ["retry-2"], [], [*ALL_DEAD, "retry-1"])),
    Action("scheduled-enqueue-selected", "scheduled", "scheduled", {},
           selection("scheduled", "add_to_queue", SCHEDULED_KEY),
           moved("schedule", "sched-1", ["sched-2"], ["sched-1"])),
    Action("scheduled-delete-selected", "scheduled", "scheduled", {}, selection("scheduled", "delete", SCHEDULED_KEY),
           moved("schedule", "sched-1", ["sched-2"], [])),
    Action("scheduled-delete-all", "scheduled", "scheduled", {}, selection("scheduled", "delete_all"),
           moved("schedule", "all", [], [])),
    Action("scheduled-page-enqueue", f"scheduled/{SCHEDULED_KEY}", f"scheduled/{SCHEDULED_KEY}",
           {"op": "Add to queue"}, (), moved("schedule", "sched-1", ["sched-2"], ["sched-1"])),
    Action("scheduled-page-delete", f"scheduled/{SCHEDULED_KEY}", f"scheduled/{SCHEDULED_KEY}", {"op": "Delete"}, (),
           moved("schedule", "sched-1", ["sched-2"], [])),
    Action("dead-retry-selected", "dead", "dead", {}, selection("dead", "retry_now", DEAD_KEY),
           moved("dead", "dead-1", ["dead-2"], ["dead-1"])),
    Action("dead-delete-selected", "dead", "dead", {}, selection("dead", "delete", DEAD_KEY),
           moved("dead", "dead-1", ["dead-2"], [])),
    Action("dead-retry-all", "dead", "dead", {}, selection("dead", "retry_all"),
           moved("dead", "all", [], ["dead-1", "dead-2"])),
    Action("dead-delete-all", "dead", "dead", {}, selection("dead", "delete_all"), moved("dead", "all", [], [])),
    Action("dead-page-retry", f"dead/{DEAD_KEY}", f"dead/{DEAD_KEY}", {"op": "Retry now"}, (),
           moved("dead", "dead-1", ["dead-2"], ["dead-1"])),
    Action("dead-page-delete", f"dead/{DEAD_KEY}", f"dead/{DEAD_KEY}", {"op": "Delete"}, (),
           moved("dead", "dead-1", ["dead-2"], [])),
    Action("busy-quiet-one", "busy", "busy", {"identity": IDENTITY, "signal": "quiet"}, (),
           signalled("TSTP", IDENTITY)),
    Action("busy-stop-one", "busy", "busy", {"identity": IDENTITY, "signal": "stop"}, (), signalled("TERM", IDENTITY)),
    Action("busy-quiet-all", "busy", "busy", {"identity": "", "signal": "quiet"}, (),
           signalled("TSTP", IDENTITY, OTHER)),
    Action("busy-stop-all", "busy", "busy", {"identity": "", "signal": "stop"}, (),
           signalled("TERM", IDENTITY, OTHER)),
    Action("busy-cancel", "busy", "cancel", {"jid": RUNNING_ITERABLE, "back": "busy"}, (),
           cancelled(RUNNING_ITERABLE)),
    Action("retry-page-cancel", f"retries/{RETRY_KEY}", "cancel", {"jid": "retry-1", "back": f"retries/{RETRY_KEY}"},
           (), cancelled("retry-1")),
]  # fmt: skip
BY_ID = {action.id: action for action in ACTIONS}


def offered(page: Document, action: Action) -> list[tuple[str, str]]:
    """The fields the page's form for ``action`` posts (its hidden inputs, the CSRF token among them, and what
    the button and the ticked boxes add), after checking the page offers that button and those boxes."""
    target = f"/{action.target}"
    if action.pick:
        form = page.form(target, **action.pick)
    else:
        [form] = [form for form in page.post_forms() if form.action == target and form.id]
        assert form.id is not None
        page.button(form.id, dict(action.extra)["action"])
        boxes = {box.get("value") for box in page.checkboxes if box.get("form") == form.id}
        assert {value for name, value in action.extra if name == "key"} <= boxes
    return [*form.fields, *action.extra]


def without(fields: list[tuple[str, str]], name: str) -> list[tuple[str, str]]:
    return [(key, value) for key, value in fields if key != name]


def with_token(fields: list[tuple[str, str]], token: str) -> list[tuple[str, str]]:
    return [*without(fields, "csrf"), ("csrf", token)]


@pytest.mark.parametrize("action", ACTIONS, ids=[action.id for action in ACTIONS])
def test_an_action_needs_the_cookie_and_its_token_from_the_same_origin(
    dashboard: Dashboard, e2e_config: kiq.Config, r: redis.Redis, action: Action
) -> None:
    base = dashboard()
    url = e2e_config.redis_url
    assert url is not None
    with httpx.Client(base_url=base) as browser, httpx.Client(base_url=base) as stranger:
        page = browser.get(f"/{action.page}")
        assert page.status_code == 200 and browser.cookies.get("kiq_csrf")
        fields = offered(parse(page.text), action)
        token = dict(fields)["csrf"]
        assert token == browser.cookies["kiq_csrf"]
        before = snapshot(url)
        target = f"/{action.target}"
        refused = {
            "no token": post_form(browser, target, without(fields, "csrf")),
            "empty token": post_form(browser, target, with_token(fields, "")),
            "wrong token": post_form(browser, target, with_token(fields, secrets.token_urlsafe(32))),
            "token without its cookie": post_form(stranger, target, fields),
            "token of another cookie": post_form(
                stranger, target, fields, {"Cookie": f"kiq_csrf={secrets.token_urlsafe(32)}"}
            ),
            **{f"from {origin}": post_form(browser, target, fields, {"Origin": origin}) for origin in EVIL_ORIGINS},
        }
        for case, answer in refused.items():
            assert answer.status_code == 403, (case, answer.status_code, answer.text)
            assert "CSRF" in answer.text, case
        assert snapshot(url) == before, "a refused POST changed Redis"

        done = post_form(browser, target, fields, {"Origin": base})
        assert done.status_code == 303, done.text
        assert done.headers["location"].startswith("/")
        action.done(r)
        assert browser.get(done.headers["location"]).status_code == 200


def test_a_post_without_an_origin_header_is_accepted_with_the_token(dashboard: Dashboard, r: redis.Redis) -> None:
    """Browsers send Origin on form posts; a request without one (curl, an old browser) still needs the token."""
    with httpx.Client(base_url=dashboard()) as browser:
        fields = offered(parse(browser.get("/dead").text), BY_ID["dead-delete-all"])
        assert post_form(browser, "/dead", fields).status_code == 303
    assert r.zcard("dead") == 0


def test_x_forwarded_host_is_believed_only_from_a_trusted_proxy(
    dashboard: Dashboard, e2e_config: kiq.Config, r: redis.Redis
) -> None:
    """A client (or a proxy that passes the client's header on) sending ``X-Forwarded-Host: evil.example`` with
    ``Origin: http://evil.example`` and a valid token is refused; the header counts once ``trusted_proxies`` names
    the peer (here the test itself, on 127.0.0.1), and then a hostile ``Host`` is not what is compared."""
    hostile = {"Origin": "http://evil.example", "X-Forwarded-Host": "evil.example"}
    with httpx.Client(base_url=dashboard()) as browser:
        fields = offered(parse(browser.get("/dead").text), BY_ID["dead-delete-all"])
        refused = post_form(browser, "/dead", fields, hostile)
        assert refused.status_code == 403 and "CSRF" in refused.text, (refused.status_code, refused.text)
        assert r.zcard("dead") == len(DEAD)
    e2e_config.trusted_proxies = ["127.0.0.0/8"]
    with httpx.Client(base_url=dashboard()) as browser:
        fields = offered(parse(browser.get("/dead").text), BY_ID["dead-delete-all"])
        spoofed_host = {"Origin": "http://evil.example", "Host": "evil.example", "X-Forwarded-Host": "dash.example"}
        assert post_form(browser, "/dead", fields, spoofed_host).status_code == 403
        assert r.zcard("dead") == len(DEAD)
        proxied = {"Origin": "https://dash.example", "X-Forwarded-Host": "dash.example"}
        assert post_form(browser, "/dead", fields, proxied).status_code == 303
    assert r.zcard("dead") == 0


def test_trusted_proxies_must_be_addresses(e2e_config: kiq.Config) -> None:
    e2e_config.trusted_proxies = ["proxy.example"]
    with pytest.raises(kiq.ConfigError, match=r"trusted_proxies: 'proxy\.example' is not an IP address"):
        kiq.contrib.web.Dashboard(e2e_config)


def pages() -> list[str]:
    """Every page of the populated dashboard."""
    return ["", "busy", "queues", "queues/alpha", "retries", "scheduled", "dead", f"retries/{RETRY_KEY}",
            f"scheduled/{SCHEDULED_KEY}", f"dead/{DEAD_KEY}", "metrics", "metrics/Greet", "retries?q=retry-1",
            "dead?order=oldest&page=2", "stats.json", "static/kiq.js", "static/kiq.css"]  # fmt: skip


def test_get_and_head_never_change_anything(dashboard: Dashboard, e2e_config: kiq.Config, r: redis.Redis) -> None:
    url = e2e_config.redis_url
    assert url is not None
    with httpx.Client(base_url=dashboard()) as browser:
        browser.get("/")
        token = browser.cookies["kiq_csrf"]
        before = snapshot(url)
        # what the forms post, sent as a GET (a link, an <img src>, a prefetch): read as a page, never acted on
        as_queries = [
            f"queues/alpha?op=clear&csrf={token}",
            f"queues/alpha?op=delete&jid=alpha-2&index=1&csrf={token}",
            f"retries?action=delete_all&csrf={token}",
            f"retries?action=delete&key={RETRY_KEY}&csrf={token}",
            f"retries/{RETRY_KEY}?op=Delete&csrf={token}",
            f"scheduled?action=delete_all&csrf={token}",
            f"dead?action=retry_all&csrf={token}",
            f"dead/{DEAD_KEY}?op=Retry+now&csrf={token}",
            f"busy?identity=&signal=stop&csrf={token}",
        ]
        for path in [*pages(), *as_queries]:
            for method in ("GET", "HEAD"):
                answer = browser.request(method, f"/{path}")
                assert answer.status_code == 200, (method, path, answer.status_code)
                assert method == "GET" or answer.content == b""
        assert snapshot(url) == before
    assert set_jids(r, "dead") == ["dead-1", "dead-2"] and r.llen("queue:alpha") == 3


def test_read_only_shows_no_button_and_refuses_every_post(
    dashboard: Dashboard, e2e_config: kiq.Config, r: redis.Redis
) -> None:
    url = e2e_config.redis_url
    assert url is not None
    with httpx.Client(base_url=dashboard(read_only=True)) as browser:
        for path in pages():
            answer = browser.get(f"/{path}")
            assert answer.status_code == 200, path
            if not answer.headers["content-type"].startswith("text/html"):
                continue
            page = parse(answer.text)
            assert not re.search(r"<form[^>]*method=\"?post", answer.text, re.IGNORECASE), path
            assert page.post_forms() == [] and page.checkboxes == [], path
            assert all(button.inside is not None and button.inside.method == "get" for button in page.buttons), path
            assert 'name="csrf"' not in answer.text, path
            assert "read-only" in page.text, path
        token = browser.cookies["kiq_csrf"]  # what a page of the writable dashboard would have put in its forms
        before = snapshot(url)
        for action in ACTIONS:
            fields = [("csrf", token), *action.pick.items(), *action.extra]
            answer = post_form(browser, f"/{action.target}", fields, {"Origin": str(browser.base_url).rstrip("/")})
            assert answer.status_code == 403, (action.id, answer.status_code)
            assert "read-only" in answer.text
        assert snapshot(url) == before
    # the same forms, on a writable dashboard, act (the refusals above were read-only mode's)
    with httpx.Client(base_url=dashboard()) as browser:
        fields = offered(parse(browser.get("/queues").text), BY_ID["queue-clear"])
        assert post_form(browser, "/queues/alpha", fields).status_code == 303
    queue_cleared(r)


# -- authorize ---------------------------------------------------------------------------------------------------
class Hook:
    """An authorize hook that answers ``decide(request)``, recording the requests it was given."""

    def __init__(self, decide: Callable[[Request], Any]) -> None:
        self.decide = decide
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> bool:
        self.requests.append(request)
        return self.decide(request)  # type: ignore[no-any-return]


def refuse_loudly(request: Request) -> bool:
    raise PermissionError("no session")


@pytest.mark.parametrize(
    "decide", [lambda request: False, refuse_loudly, lambda request: 1, lambda request: "yes", lambda request: None],
    ids=["false", "raises", "one", "a string", "none"],
)  # fmt: skip
def test_an_authorize_hook_that_does_not_say_true_answers_403_everywhere(
    dashboard: Dashboard, e2e_config: kiq.Config, r: redis.Redis, decide: Callable[[Request], Any],
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    url = e2e_config.redis_url
    assert url is not None
    hook = Hook(decide)
    before = snapshot(url)
    with caplog.at_level(logging.ERROR, "kiq.web"), httpx.Client(base_url=dashboard(authorize=hook)) as browser:
        for path in pages():
            answer = browser.get(f"/{path}")
            assert answer.status_code == 403, path
            assert "set-cookie" not in answer.headers and "retry-1" not in answer.text and "alpha" not in answer.text
        token = secrets.token_urlsafe(32)
        for action in ACTIONS:
            fields = [("csrf", token), *action.pick.items(), *action.extra]
            answer = post_form(browser, f"/{action.target}", fields, {"Cookie": f"kiq_csrf={token}"})
            assert answer.status_code == 403, action.id
    assert snapshot(url) == before
    assert len(hook.requests) == len(pages()) + len(ACTIONS)
    assert ("the authorize hook raised" in caplog.text) == (decide is refuse_loudly)


def test_an_authorize_hook_that_says_true_lets_the_request_in(dashboard: Dashboard, r: redis.Redis) -> None:
    """The hook sees each request (its path below the dashboard, its headers, the WSGI environ as ``native``) and
    may decide by it: here, a header a proxy in front would set."""
    hook = Hook(lambda request: request.headers.get("x-staff") == "yes")
    with httpx.Client(base_url=dashboard(authorize=hook)) as browser:
        assert browser.get("/dead").status_code == 403
        browser.headers["X-Staff"] = "yes"
        for path in pages():
            assert browser.get(f"/{path}").status_code == 200, path
        fields = offered(parse(browser.get("/dead").text), BY_ID["dead-delete-all"])
        assert post_form(browser, "/dead", fields).status_code == 303
    assert r.zcard("dead") == 0
    seen = hook.requests[0]
    assert seen.method == "GET" and seen.path == "/dead" and seen.root == ""
    assert isinstance(seen.native, dict) and seen.native["PATH_INFO"] == "/dead"  # the WSGI environ
    assert [request.method for request in hook.requests][-1] == "POST"


# -- escaping ----------------------------------------------------------------------------------------------------
HOSTILE = MARKUP + "\x00 \ud800 end"  # with NUL and a lone surrogate (JSON escapes in Redis)
HOSTILE_QUEUE = "q" + MARKUP + "\x00"
HOSTILE_JID = "j-" + MARKUP + "\x00"
RAW_PAYLOAD = b'{"class":"Raw\xff' + MARKUP.encode() + b'","args":["\xff\x00"],"jid":"raw\xff","queue":"default"}'
HOSTILE_CLASS = "Job" + MARKUP + "\x00"


def backtrace(lines: list[str]) -> str:
    """``error_backtrace`` as the retry logic stores it: base64 of zlib-compressed JSON."""
    return base64.b64encode(zlib.compress(json.dumps(lines).encode())).decode()


@pytest.fixture
def hostile(e2e_config: kiq.Config) -> redis.Redis:
    """Every place the pages show a value from Redis holds markup, NUL, lone surrogates and bytes that are not
    UTF-8; written raw (bytes) where kiq's client could not write them."""
    url = e2e_config.redis_url
    assert url is not None
    raw = redis.Redis.from_url(url)
    payload = failed(HOSTILE_JID, HOSTILE_CLASS, HOSTILE_QUEUE, args=[HOSTILE, {"k": HOSTILE}, 1.5],
                     error_class=MARKUP, error_message=HOSTILE, error_backtrace=backtrace([HOSTILE, "line 2"]),
                     tags=[HOSTILE])  # fmt: skip
    encoded = json.dumps(payload).encode()  # lone surrogates and NUL as JSON escapes: valid JSON
    for name, score in (("retry", FUTURE), ("schedule", FUTURE), ("dead", PAST)):
        raw.zadd(name, {encoded: score, RAW_PAYLOAD: score + 1})
    raw.sadd("queues", HOSTILE_QUEUE.encode(), b"bytes\xff" + MARKUP.encode())
    raw.lpush(f"queue:{HOSTILE_QUEUE}".encode(), encoded, RAW_PAYLOAD)
    identity = b"host" + MARKUP.encode() + b"\xff:4242:abc"
    info = {"hostname": HOSTILE, "tag": HOSTILE, "labels": [HOSTILE], "queues": [HOSTILE], "identity": "x" + HOSTILE}
    add_process(raw, identity, info, {"tid" + MARKUP: job(HOSTILE_JID, HOSTILE_CLASS, HOSTILE, [HOSTILE])})
    add_metrics(raw, HOSTILE_CLASS)
    add_metrics(raw, b"Raw\xff" + MARKUP.encode())
    raw.close()
    return e2e_config.redis


def assert_escaped(answer: httpx.Response, status: int = 200, shows: bool = True) -> Document:
    """The answer is an HTML page that shows the hostile values as text: no markup of theirs, no NUL, and valid
    UTF-8; its only script is the dashboard's own."""
    where = str(answer.url)
    assert answer.status_code == status, (where, answer.status_code, answer.text[-500:])
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    text = answer.content.decode("utf-8")  # strict: a lone surrogate or stray byte would fail here
    assert "<script>alert" not in text and "<img" not in text and "\x00" not in text, where
    assert ESCAPED_SCRIPT in text or not shows, f"{where} does not show the value at all"
    page = parse(text)
    assert not [tag for tag, _ in page.tags if tag in ("img", "iframe", "object", "embed")], where
    scripts = [attributes for tag, attributes in page.tags if tag == "script"]
    assert [attributes.get("src") for attributes in scripts] == ["/static/kiq.js"], where
    handlers = [(tag, name) for tag, attributes in page.tags for name in attributes if name.startswith("on")]
    assert handlers == [], where
    return page


def test_values_from_redis_are_escaped_on_every_page(dashboard: Dashboard, hostile: redis.Redis) -> None:
    with httpx.Client(base_url=dashboard()) as browser:
        queues = assert_escaped(browser.get("/queues"))
        [queue_link] = [link for link in queues.links() if link.startswith("/queues/q")]
        queue_page = assert_escaped(browser.get(queue_link))
        assert set(queue_page.column("jobs", 2)) >= {"j-" + MARKUP + "\\x00"}  # the jid, NUL shown as an escape
        for listing in ("/retries", "/scheduled", "/dead"):
            page = assert_escaped(browser.get(listing))
            entries = [link for link in page.links() if link.startswith(f"{listing}/")]
            assert len(entries) == 2, (listing, entries)  # the hostile entry and the raw one
            for entry in entries:
                job_page = assert_escaped(browser.get(entry))
                assert MARKUP in "".join(job_page.texts["pre"])  # the payload (and backtrace), as text
            assert_escaped(browser.get(listing, params={"q": "<script>"}))  # the filter, echoed in its input
        assert_escaped(browser.get("/busy"))
        metrics = assert_escaped(browser.get("/metrics"))
        [class_link] = [link for link in metrics.links() if link.startswith("/metrics/Job")]
        assert_escaped(browser.get(class_link))
        assert_escaped(browser.get("/"), shows=False)  # counters only, but they count the hostile entries
        assert_escaped(browser.get(f"/dead/x{MARKUP}"), 404)  # "malformed entry ...": names what was asked for


def test_a_long_argument_is_cut_for_the_table_and_shown_whole_on_the_job_page(
    dashboard: Dashboard, r: redis.Redis
) -> None:
    """The table shows the arguments' JSON cut to a length, escaped once (the text a reader sees is the JSON)."""
    long = 'say "hi" & <b>' * 20
    r.zadd("dead", {json.dumps(failed("long-1", args=[long])): PAST + 10})
    with httpx.Client(base_url=dashboard()) as browser:
        page = parse(browser.get("/dead").text)
        [shown] = [row[4].text for row in page.tables["entries"] if row[3].hrefs[0].endswith("-long-1")]
        expected = json.dumps([long], ensure_ascii=False)
        assert shown.endswith("…") and expected.startswith(shown[:-1]) and len(shown) > 100
        whole = parse(browser.get(f"/dead/{entry_key(PAST + 10, 'long-1')}").text)
        assert expected in whole.texts["code"]  # the Arguments, whole
        assert json.dumps(long, ensure_ascii=False) in "".join(whole.texts["pre"])  # the payload


# -- the Content-Security-Policy ---------------------------------------------------------------------------------
def directives(policy: str) -> dict[str, list[str]]:
    parsed: dict[str, list[str]] = {}
    for part in policy.split(";"):
        name, *values = part.split()
        parsed[name] = values
    return parsed


def test_html_answers_allow_no_inline_script_or_style(dashboard: Dashboard, r: redis.Redis) -> None:
    with httpx.Client(base_url=dashboard()) as browser:
        answers = [browser.get(f"/{path}") for path in pages() if not path.startswith(("static", "stats"))]
        answers.append(browser.get("/no/such/page"))
        token = browser.cookies["kiq_csrf"]
        answers.append(post_form(browser, "/dead", [("csrf", token), ("action", "nope")]))  # 400: not an action
    assert {answer.status_code for answer in answers} == {200, 404, 400}
    for answer in answers:
        assert answer.headers["content-type"] == "text/html; charset=utf-8"
        policy = directives(answer.headers["content-security-policy"])
        assert policy["default-src"] == ["'none'"]
        assert policy["script-src"] == ["'self'"] and policy["style-src"] == ["'self'"]
        assert not [value for values in policy.values() for value in values if "unsafe" in value]
        assert policy["frame-ancestors"] == ["'none'"] and policy["form-action"] == ["'self'"]
        assert answer.headers["x-frame-options"] == "DENY" and answer.headers["x-content-type-options"] == "nosniff"
        page = parse(answer.text)
        inline = [attributes for tag, attributes in page.tags if tag == "script" and not attributes.get("src")]
        assert inline == [] and "<style" not in answer.text
        assert not [(tag, name) for tag, attributes in page.tags for name in attributes
                    if name == "style" or name.startswith("on")]  # fmt: skip


# -- Redis down --------------------------------------------------------------------------------------------------
def test_an_unreachable_redis_answers_503_pages_never_500(
    dashboard: Dashboard, caplog: pytest.LogCaptureFixture
) -> None:
    down = kiq.Config(redis_url="redis://127.0.0.1:1/0")  # nothing listens on port 1
    with caplog.at_level(logging.WARNING, "kiq.web"), httpx.Client(base_url=dashboard(config=down)) as browser:
        for path in pages():
            answer = browser.get(f"/{path}")
            if path.startswith("static/"):  # the assets need no Redis
                assert answer.status_code == 200
                continue
            assert answer.status_code == 503, (path, answer.status_code)
            assert "Traceback" not in answer.text and 'File "' not in answer.text
            if path != "stats.json":
                assert answer.headers["content-type"].startswith("text/html")
                page = parse(answer.text)
                assert ("div", {"class": "banner", "role": "alert"}) in page.tags, path
                assert "Redis is unavailable" in page.text, path
        token = browser.cookies["kiq_csrf"]
        fields = [("csrf", token), ("action", "delete_all")]
        assert post_form(browser, "/dead", fields).status_code == 503
    assert "Redis failed" in caplog.text


# -- kiq web -----------------------------------------------------------------------------------------------------
def listening_address(port: int) -> str:
    """The address a local TCP socket listens on for ``port`` (from /proc/net/tcp, IPv4)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":  # LISTEN
            return ".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0))
    raise AssertionError(f"nothing listens on port {port}")


def test_kiq_web_asks_for_the_password_binds_loopback_and_stops_on_sigterm(e2e_config: kiq.Config) -> None:
    url = e2e_config.redis_url
    assert url is not None
    with kiq_web(url, "--password", "secret") as (process, base):
        assert base.startswith("http://127.0.0.1:")
        if Path("/proc/net/tcp").exists():  # Linux: what the socket is bound to, not only what it says
            assert listening_address(int(base.rsplit(":", 1)[1])) == "127.0.0.1"
        anonymous = httpx.get(f"{base}/queues")
        assert anonymous.status_code == 401 and "<h1>" not in anonymous.text
        assert anonymous.headers["www-authenticate"].startswith("Basic realm=")
        assert httpx.get(f"{base}/queues", auth=("kiq", "wrong")).status_code == 401
        assert httpx.get(f"{base}/queues", auth=("someone", "secret")).status_code == 401
        assert httpx.get(f"{base}/static/kiq.css").status_code == 401  # the assets too
        signed_in = httpx.get(f"{base}/queues", auth=("kiq", "secret"))
        assert signed_in.status_code == 200 and "<h1>Queues</h1>" in signed_in.text
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0


def test_kiq_web_accepts_a_bearer_token(e2e_config: kiq.Config) -> None:
    url = e2e_config.redis_url
    assert url is not None
    with kiq_web(url, "--token", "t0ken") as (process, base):
        assert httpx.get(f"{base}/").status_code == 401
        assert httpx.get(f"{base}/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        answer = httpx.get(f"{base}/", headers={"Authorization": "Bearer t0ken"})
        assert answer.status_code == 200 and "<h1>Dashboard</h1>" in answer.text
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0


def test_kiq_web_read_only_refuses_posts(e2e_config: kiq.Config, r: redis.Redis) -> None:
    url = e2e_config.redis_url
    assert url is not None
    with kiq_web(url, "--read-only") as (process, base), httpx.Client(base_url=base) as browser:
        page = browser.get("/dead")
        assert page.status_code == 200 and parse(page.text).post_forms() == []
        token = browser.cookies["kiq_csrf"]
        answer = post_form(browser, "/dead", [("csrf", token), ("action", "delete_all")], {"Origin": base})
        assert answer.status_code == 403
        assert r.zcard("dead") == 2
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
