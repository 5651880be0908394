"""Helpers for the dashboard's HTTP-level tests (no browser): its HTML read back (links, forms, buttons, tables),
jobs and a worker's process entry written into Redis as producers and workers write them, form posts, and a
snapshot of Redis to tell that a request changed nothing, and ``kiq web`` run as a command."""

from __future__ import annotations

import json
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlencode

import httpx
import redis

import kiq
from kiq.keys import histogram_key, metrics_key, sidekiq8_histogram_key, sidekiq8_minute_key, sidekiq8_rollup_key
from tests.support import ROOT, child_env, fresh_config, spare_url

MARKUP = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
URL_ATTRIBUTES = {("a", "href"), ("link", "href"), ("script", "src"), ("form", "action")}


def private_config(url: str) -> Iterator[kiq.Config]:
    """What tests/conftest.py's ``e2e_config`` gives (a config on an emptied database, the process default while
    the test runs), on a spare database of the test Redis: these tests act on whatever is there ("Stop all" signals
    every process registered) and compare what they find with what they wrote."""
    yield from fresh_config(spare_url(url))


@dataclass
class Form:
    method: str
    action: str
    id: str | None
    fields: list[tuple[str, str]]  # its inputs that have a name, in order (hidden ones: csrf, op, jid...)


@dataclass
class Button:
    label: str
    name: str | None
    value: str | None
    form: str | None  # the id of the form it submits (``form=`` attribute), else None
    inside: Form | None  # the form it sits in


@dataclass
class Cell:
    text: str = ""
    hrefs: list[str] = field(default_factory=list)


class Document(HTMLParser):
    """A page, parsed: every start tag with its attributes, the URLs it points to, its forms, buttons,
    checkboxes and tables (by id: their body rows), and its text (also by element: ``texts["h1"]``)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.forms: list[Form] = []
        self.buttons: list[Button] = []
        self.checkboxes: list[dict[str, str | None]] = []
        self.tables: dict[str, list[list[Cell]]] = {}
        self.texts: dict[str, list[str]] = {}  # tag -> the text of each such element
        self.chunks: list[str] = []
        self._form: Form | None = None
        self._button: Button | None = None
        self._table: str | None = None
        self._in_body = False
        self._cell: Cell | None = None
        self._open: list[str] = []  # the elements whose text is being collected

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag == "form":
            self._form = Form(
                str(attributes.get("method") or "get").lower(),
                str(attributes.get("action") or ""),
                attributes.get("id"),
                [],
            )
            self.forms.append(self._form)
        elif tag == "input":
            if attributes.get("type") == "checkbox":
                self.checkboxes.append(attributes)
            elif self._form is not None and attributes.get("name"):
                self._form.fields.append((str(attributes["name"]), str(attributes.get("value") or "")))
        elif tag == "button":
            self._button = Button(
                "", attributes.get("name"), attributes.get("value"), attributes.get("form"), self._form
            )
            self.buttons.append(self._button)
        elif tag == "table":
            self._table = attributes.get("id") or f"table-{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._table is not None and self._in_body:
            self.tables[self._table].append([])
        elif tag == "td" and self._table is not None and self._in_body:
            self._cell = Cell()
            self.tables[self._table][-1].append(self._cell)
        if tag == "a" and self._cell is not None and attributes.get("href"):
            self._cell.hrefs.append(str(attributes["href"]))
        if tag in (
            "h1",
            "h2",
            "p",
            "pre",
            "dt",
            "dd",
            "th",
            "title",
            "nav",
            "main",
            "code",
            "time",
            "span",
            "a",
            "text",
            "figcaption",
        ):
            self._open.append(tag)
            self.texts.setdefault(tag, []).append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        elif tag == "button":
            self._button = None
        elif tag == "table":
            self._table = None
        elif tag == "tbody":
            self._in_body = False
        elif tag == "td":
            self._cell = None
        if self._open and self._open[-1] == tag:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)
        if self._button is not None:
            self._button.label += data
        if self._cell is not None:
            self._cell.text += data
        for tag in self._open:
            self.texts[tag][-1] += data

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def urls(self) -> list[str]:
        """Every URL the page links to or loads: links, stylesheets, scripts, form actions, data-source."""
        found = [
            str(value)
            for tag, attributes in self.tags
            for name, value in attributes.items()
            if value is not None and ((tag, name) in URL_ATTRIBUTES or name == "data-source")
        ]
        return [url for url in found if not url.startswith("data:")]

    def links(self) -> list[str]:
        return [str(attributes["href"]) for tag, attributes in self.tags if tag == "a" and attributes.get("href")]

    def csrf(self) -> str:
        tokens = {value for form in self.forms for name, value in form.fields if name == "csrf"}
        assert len(tokens) == 1, f"one CSRF token expected in the page's forms, found {tokens}"
        return tokens.pop()

    def post_forms(self) -> list[Form]:
        return [form for form in self.forms if form.method != "get"]

    def form(self, action: str, **fields: str) -> Form:
        """The form posting to ``action`` whose fields include ``fields``."""
        for form in self.forms:
            if form.action == action and all((name, value) in form.fields for name, value in fields.items()):
                return form
        raise AssertionError(f"no form to {action} with {fields}: {[(f.action, f.fields) for f in self.forms]}")

    def button(self, form: str, value: str) -> Button:
        """The button that submits the form with id ``form`` as ``action=value``."""
        for button in self.buttons:
            if button.form == form and button.name == "action" and button.value == value:
                return button
        raise AssertionError(f"no {value} button for the form {form}")

    def column(self, table: str, index: int) -> list[str]:
        return [row[index].text for row in self.tables.get(table, [])]


def parse(html: str) -> Document:
    document = Document()
    document.feed(html)
    document.close()
    return document


def post_form(
    client: httpx.Client, url: str, fields: Iterable[tuple[str, str]], headers: Mapping[str, str] | None = None
) -> httpx.Response:
    """POST ``fields`` (repeated names allowed) as a browser posts a form."""
    body = urlencode(list(fields))
    all_headers = {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})}
    return client.post(url, content=body.encode(), headers=all_headers)


# -- what producers and workers write ----------------------------------------------------------------------
def job(
    jid: str, klass: str = "Greet", queue: str = "default", args: list[Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """A payload as kiq and Sidekiq write it."""
    now = time.time()
    payload = {"class": klass, "args": ["x"] if args is None else args, "queue": queue, "jid": jid, "retry": True,
               "created_at": now, "enqueued_at": now}  # fmt: skip
    payload.update(extra)
    return payload


def failed(jid: str, klass: str = "Fragile", queue: str = "default", **extra: Any) -> dict[str, Any]:
    """A payload as the retry logic writes it into the retry or dead set."""
    now = time.time()
    failure = {"error_class": "RuntimeError", "error_message": "broken", "failed_at": now, "retry_count": 2}
    return job(jid, klass, queue, **{**failure, **extra})


def enqueue(r: redis.Redis, queue: str, *payloads: dict[str, Any]) -> None:
    """Push as the client does: LPUSH (so the newest is first) and the queue's name in ``queues``."""
    pipe = r.pipeline(transaction=True)
    pipe.sadd("queues", queue)
    for payload in payloads:
        pipe.lpush(f"queue:{queue}", json.dumps(payload))
    pipe.execute()


def entry_key(score: float, jid: str) -> str:
    """How the dashboard names an entry of a sorted set in its URLs and forms."""
    return f"{score!r}-{jid}"


def add_process(
    r: redis.Redis,
    identity: str | bytes,
    info: Mapping[str, Any] | None = None,
    work: Mapping[str, Any] | None = None,
) -> None:
    """A live worker's entry in the process registry, as the launcher's heartbeat writes it (``work``: thread id
    -> the job running on it). ``identity`` may be bytes that are not UTF-8 (with a raw client)."""
    name = identity.decode("utf-8", "surrogateescape") if isinstance(identity, bytes) else identity
    described = {
        "hostname": name.rsplit(":", 2)[0], "started_at": time.time() - 60, "pid": 4242, "tag": "shop",
        "concurrency": 5, "queues": ["default"], "weights": [{"default": 0}], "labels": [], "identity": name,
        "version": "0.1.0", "embedded": False, "heartbeat_interval": 10.0, **(info or {}),
    }  # fmt: skip
    work_key = identity + (b":work" if isinstance(identity, bytes) else ":work")  # type: ignore[operator]
    pipe = r.pipeline(transaction=True)
    pipe.sadd("processes", identity)
    fields = {"info": json.dumps(described), "busy": len(work or {}), "beat": time.time(), "rtt_us": 120,
              "quiet": "false", "rss": 40960}  # fmt: skip
    pipe.hset(identity, mapping=fields)  # type: ignore[arg-type]
    pipe.expire(identity, 60)
    for thread, running in (work or {}).items():
        entry = {"queue": running.get("queue", "default"), "payload": json.dumps(running), "run_at": time.time()}
        pipe.hset(work_key, thread, json.dumps(entry))
    pipe.execute()


def add_metrics(connection: redis.Redis, name: str | bytes) -> None:
    """A minute of a job class's execution metrics, as a worker's heartbeat writes them by default: in Sidekiq 7's
    and 8's keys (``name`` may be bytes that are not UTF-8)."""
    minute = time.gmtime()
    text = name if isinstance(name, str) else name.decode("utf-8", "surrogateescape")
    fields = {f"{text}|{metric}".encode("utf-8", "surrogateescape"): count for metric, count in METRICS.items()}
    for key in (metrics_key, sidekiq8_minute_key, sidekiq8_rollup_key):
        connection.hset(key(minute), mapping=fields)  # type: ignore[arg-type]
    for histogram in (histogram_key, sidekiq8_histogram_key):
        connection.bitfield(histogram(text, minute).encode("utf-8", "surrogateescape")).incrby("u16", "#4", 2).execute()


METRICS = {"p": 3, "f": 1, "ms": 250}  # runs (failures included), failures, milliseconds of the successes


def snapshot(url: str, *keys: str | bytes) -> dict[str | bytes, Any]:
    """The values of ``keys`` (bytes, as stored; None for a missing key) in the database at ``url``; without
    ``keys``, of every key but the lock of the process cleanup (which reading the Busy page takes)."""
    raw = redis.Redis.from_url(url)
    try:
        state: dict[str | bytes, Any] = {}
        for key in keys or [key for key in raw.scan_iter(count=1000) if key != b"process_cleanup"]:
            kind = raw.type(key)
            if kind == b"string":
                state[key] = raw.get(key)
            elif kind == b"list":
                state[key] = raw.lrange(key, 0, -1)
            elif kind == b"set":
                state[key] = sorted(raw.smembers(key))
            elif kind == b"zset":
                state[key] = raw.zrange(key, 0, -1, withscores=True)
            elif kind == b"hash":
                state[key] = sorted(raw.hgetall(key).items())
            else:
                state[key] = None if kind == b"none" else kind
        return state
    finally:
        raw.close()


def queued_jids(r: redis.Redis, queue: str = "default") -> list[str]:
    """The jids in a queue, newest first."""
    return [json.loads(value)["jid"] for value in r.lrange(f"queue:{queue}", 0, -1)]


def set_jids(r: redis.Redis, name: str) -> list[str]:
    """The jids in a sorted set, lowest score first."""
    return [json.loads(str(value))["jid"] for value in r.zrange(name, 0, -1)]


# -- kiq web -----------------------------------------------------------------------------------------------------
SERVING = re.compile(r"serving the dashboard on (http://\S+?)/? ")


@contextmanager
def kiq_web(redis_url: str, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``kiq web`` on a free port: the process and the URL it says it serves."""
    process = subprocess.Popen(
        [sys.executable, "-m", "kiq.cli", "web", "--redis-url", redis_url, "--port", "0", *args],
        cwd=ROOT, env=child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 30
        said = ""
        while (found := SERVING.search(said)) is None:
            left = deadline - time.monotonic()
            assert left > 0 and process.poll() is None, f"kiq web did not start: {said}"
            if select.select([process.stdout], [], [], left)[0]:
                said += process.stdout.readline()
        yield process, found.group(1)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
