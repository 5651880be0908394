"""The tracking polling endpoints as framework-free ASGI and WSGI apps (mount them anywhere).

    GET /tasks/<id>                      a task: counts per status, total, done, progress, complete, cursor,
                                         and its events (``?events=0`` leaves them out)
    GET /tasks?ids=<id>,<id>             several tasks at once: {"tasks": [...], "missing": [...]}
    GET /tasks/<id>/events?since=<cursor>&limit=<n>
                                         events changed after the cursor: {"events", "cursor", "more"}
    GET /jobs/<jid>                      one job's event (jobs tracked with ``track: True``)
    GET /tasks/<id>/page                 the HTML status page (polls the endpoints above)

Unknown ids answer 404, malformed ids or parameters 400, other methods 405, and a database that cannot be
reached 503: never a 500. Task ids are 128 random bits, so knowing one is what grants reading it; put the
app behind your own authentication if that is not enough.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from kiq.plugins.tracking import Tracker, tracker_for

from .tracking_page import render_page

log = logging.getLogger("kiq.tracking")

TASK_ID = re.compile(r"[0-9a-f]{32}")
JOB_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
MAX_IDS = 100
MAX_LIMIT = 10_000

Response = tuple[int, str, bytes]


class BadRequest(Exception):
    pass


def _json(status: int, body: Any) -> Response:
    return status, "application/json", json.dumps(body, separators=(",", ":")).encode()


def _error(status: int, message: str) -> Response:
    return _json(status, {"error": message})


def _task_id(raw: str) -> str:
    if not TASK_ID.fullmatch(raw):
        raise BadRequest(f"malformed task id {raw[:64]!r}: expected 32 hex digits")
    return raw


def _int(query: dict[str, list[str]], name: str, default: int, maximum: int) -> int:
    values = query.get(name)
    if not values:
        return default
    raw = values[-1]
    if not raw.isdigit() or len(raw) > 18 or int(raw) > maximum:
        raise BadRequest(f"{name} must be a whole number from 0 to {maximum}, got {raw[:32]!r}")
    return int(raw)


class TrackingEndpoints:
    """Routing and answers, shared by the ASGI and WSGI apps."""

    def __init__(self, tracker: Tracker | None = None) -> None:
        self._tracker = tracker

    @property
    def tracker(self) -> Tracker:
        if self._tracker is None:
            self._tracker = tracker_for()
        return self._tracker

    def handle(self, method: str, path: str, query_string: str) -> Response:
        if method not in ("GET", "HEAD"):
            return _error(405, "only GET is supported")
        try:
            query = parse_qs(query_string, keep_blank_values=True, max_num_fields=20, strict_parsing=False)
            return self._route([part for part in path.split("/") if part], query)
        except (BadRequest, ValueError) as exc:
            return _error(400, str(exc))
        except Exception as exc:  # the database is away or broken: say so, without a stack trace
            log.warning("tracking endpoint %s failed: %s", path, exc)
            return _error(503, "the tracking database is unavailable")

    def _route(self, parts: list[str], query: dict[str, list[str]]) -> Response:
        store = self.tracker.store
        match parts:
            case ["tasks"]:
                raw = ",".join(query.get("ids", []))
                ids = [_task_id(part) for part in raw.split(",") if part]
                if not ids or len(ids) > MAX_IDS:
                    raise BadRequest(f"ids must list 1 to {MAX_IDS} task ids, separated by commas")
                found = store.tasks(ids)
                return _json(200, {"tasks": list(found.values()), "missing": [i for i in ids if i not in found]})
            case ["tasks", raw_id]:
                with_events = query.get("events", ["1"])[-1] not in ("0", "false", "no")
                task = store.task(_task_id(raw_id), with_events)
                return _json(200, task) if task is not None else _error(404, "no such task")
            case ["tasks", raw_id, "events"]:
                task_id = _task_id(raw_id)
                since = _int(query, "since", 0, 2**62)
                limit = _int(query, "limit", 1000, MAX_LIMIT)
                if limit == 0:
                    raise BadRequest("limit must be at least 1")
                events = store.events_since(task_id, since, limit)
                return _json(200, events) if events is not None else _error(404, "no such task")
            case ["tasks", raw_id, "page"]:
                task_id = _task_id(raw_id)
                if store.task(task_id, with_events=False) is None:
                    return _error(404, "no such task")
                return 200, "text/html; charset=utf-8", render_page(task_id).encode()
            case ["jobs", raw_jid]:
                if not JOB_ID.fullmatch(raw_jid):
                    raise BadRequest(f"malformed job id {raw_jid[:64]!r}")
                event = store.event(raw_jid)
                return _json(200, event) if event is not None else _error(404, "no such job")
        return _error(404, "not found")


def _headers(content_type: str, length: int) -> list[tuple[str, str]]:
    return [("Content-Type", content_type), ("Content-Length", str(length)), ("Cache-Control", "no-store")]


def asgi_app(tracker: Tracker | None = None) -> Callable[..., Any]:
    """An ASGI 3 app serving the endpoints (database calls run in a worker thread)."""
    endpoints = TrackingEndpoints(tracker)

    async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):  # mounted under a prefix (Starlette keeps it in path)
            path = path[len(root) :]
        query = scope.get("query_string", b"").decode("latin-1")
        status, content_type, body = await asyncio.to_thread(endpoints.handle, scope["method"], path, query)
        await send({"type": "http.response.start", "status": status, "headers": [
            (name.lower().encode(), value.encode()) for name, value in _headers(content_type, len(body))
        ]})  # fmt: skip
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})

    return app


def wsgi_app(tracker: Tracker | None = None) -> Callable[..., Iterable[bytes]]:
    """A WSGI app serving the endpoints."""
    endpoints = TrackingEndpoints(tracker)
    reasons = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Unavailable"}

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        # PEP 3333: PATH_INFO is latin-1-decoded bytes; recover the UTF-8 text
        path = environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8", "replace")
        status, content_type, body = endpoints.handle(method, path, environ.get("QUERY_STRING", ""))
        start_response(f"{status} {reasons[status]}", _headers(content_type, len(body)))
        return [b"" if method == "HEAD" else body]

    return app
