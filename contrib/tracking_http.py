"""The tracking polling endpoints as framework-free ASGI and WSGI apps (mount them anywhere).

    GET /tasks/<id>                      a task: counts per status, total, done, progress, complete, cursor,
                                         and its events (``?events=0`` leaves them out)
    GET /tasks?ids=<id>,<id>             several tasks at once: {"tasks": [...], "missing": [...]}
    GET /tasks/<id>/events?since=<cursor>&limit=<n>
                                         events changed after the cursor: {"events", "cursor", "more"}
    GET /jobs/<jid>                      one job's event (its ``task_id`` only with an ``authorize`` hook), with its
                                         ``result`` when the results plugin keeps it
    GET /tasks/<id>/page                 the HTML status page (polls the endpoints above)
    GET /batches/<bid>                   a batch's status (kiq.plugins.batch), read from the tracker's Redis
    GET /workflows/<id>                  a workflow's status (kiq.plugins.workflow: its state, result, error and
                                         every step), read from the tracker's Redis

Unknown ids answer 404, malformed ids or parameters 400, other methods 405, a request the ``authorize`` hook
denies 403, and a database that cannot be reached 503: never a 500.

Without a hook, a task id is what grants reading a task (128 random bits), so the endpoints never hand one out:
``/jobs/<jid>`` leaves it out, as jids appear in every log line. A bid (128 random bits too) likewise grants
reading its batch's status, and a workflow id its workflow's. With ``authorize(request, resource)``, every
answer that holds data is first allowed by the hook, given the framework's own request (so the host app's
sessions and users reach it) and a ``Resource`` that says what is read.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar
from urllib.parse import parse_qs

from kiq.plugins.batch import status as batch_status
from kiq.plugins.tracking import Tracker, tracker_for
from kiq.plugins.workflow import status as workflow_status

from .http import Answer, Request, WSGIRequest, serve_asgi, serve_wsgi, wsgi_path
from .tracking_page import content_security_policy, new_nonce, render_page

if TYPE_CHECKING:
    from starlette.requests import Request as StarletteRequest

log = logging.getLogger("kiq.tracking")

TASK_ID = re.compile(r"[0-9a-f]{32}")
JOB_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
BATCH_ID = JOB_ID  # a bid: ours are 22 URL-safe characters, Sidekiq Pro's 14
MAX_IDS = 100
MAX_LIMIT = 10_000
ALLOW = "GET, HEAD"


@dataclass(frozen=True)
class Resource:
    """What a request reads, as the ``authorize`` hook sees it.

    ``kind`` "task": ``/tasks/<id>``, its events and its page, and each id of ``/tasks?ids=`` (one call per id;
    the denied ones are answered as missing); ``id`` and ``task_id`` are the task id.
    ``kind`` "job": ``/jobs/<jid>``; ``id`` is the jid and ``task_id`` the task the job belongs to, or None for a
    job tracked on its own or not tracked at all (the hook is asked before the answer says which).
    ``kind`` "batch": ``/batches/<bid>``; ``id`` is the bid, ``task_id`` None.
    ``kind`` "workflow": ``/workflows/<id>``; ``id`` is the workflow id, ``task_id`` None.
    """

    kind: Literal["task", "job", "batch", "workflow"]
    id: str
    task_id: str | None


RequestT = TypeVar("RequestT")
# authorize(request, resource) -> True to answer; anything else (False, an exception) answers 403. A plain
# function, not async: the ASGI app calls it in a worker thread, so it may block on a lookup.
Authorize = Callable[[RequestT, Resource], bool]


class BadRequest(Exception):
    pass


class Forbidden(Exception):
    pass


def _json(status: int, body: Any, headers: tuple[tuple[str, str], ...] = ()) -> Answer:
    return Answer(status, "application/json", json.dumps(body, separators=(",", ":")).encode(), headers=headers)


def _error(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Answer:
    return _json(status, {"error": message}, headers)


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


class TrackingEndpoints(Generic[RequestT]):
    """Routing, authorization and answers, shared by the ASGI and WSGI apps and the framework adapters."""

    def __init__(self, tracker: Tracker | None = None, authorize: Authorize[RequestT] | None = None) -> None:
        self._tracker = tracker
        self.authorize = authorize

    @property
    def tracker(self) -> Tracker:
        if self._tracker is None:
            self._tracker = tracker_for()
        return self._tracker

    def handle(self, method: str, path: str, query_string: str, request: RequestT) -> Answer:
        """The answer to ``method path?query_string``; ``request`` is only handed to the ``authorize`` hook."""
        if method not in ("GET", "HEAD"):
            return _error(405, "only GET and HEAD are supported", (("Allow", ALLOW),))
        try:
            query = parse_qs(query_string, keep_blank_values=True, max_num_fields=20, strict_parsing=False)
            return self._route([part for part in path.split("/") if part], query, request)
        except (BadRequest, ValueError) as exc:
            return _error(400, str(exc))
        except Forbidden:
            return _error(403, "not allowed")
        except Exception as exc:  # the database is away or broken: say so, without a stack trace
            log.warning("tracking endpoint %s failed: %s", path, exc)
            return _error(503, "the tracking database is unavailable")

    def answer(self, request: Request) -> Answer:
        """``handle`` for a ``kiq.contrib.http.Request`` (its ``native`` is what ``authorize`` gets)."""
        return self.handle(request.method, request.path, request.query, request.native)

    def _allows(self, request: RequestT, resource: Resource) -> bool:
        if self.authorize is None:
            return True
        try:
            allowed = self.authorize(request, resource)
        except Exception:
            log.exception("tracking: the authorize hook raised for %s; answering 403", resource)
            return False
        if not isinstance(allowed, bool):  # e.g. a coroutine from an async hook: truthy, but it decided nothing
            if inspect.iscoroutine(allowed):
                allowed.close()
            log.error("tracking: the authorize hook returned %r, not a bool; answering 403", allowed)
            return False
        return allowed

    def _check(self, request: RequestT, task_id: str) -> str:
        if not self._allows(request, Resource("task", task_id, task_id)):
            raise Forbidden
        return task_id

    def _route(self, parts: list[str], query: dict[str, list[str]], request: RequestT) -> Answer:
        store = self.tracker.store
        match parts:
            case ["tasks"]:
                raw = ",".join(query.get("ids", []))
                ids = [_task_id(part) for part in raw.split(",") if part]
                if not ids or len(ids) > MAX_IDS:
                    raise BadRequest(f"ids must list 1 to {MAX_IDS} task ids, separated by commas")
                allowed = [task_id for task_id in ids if self._allows(request, Resource("task", task_id, task_id))]
                found = store.tasks(allowed)
                return _json(200, {"tasks": list(found.values()), "missing": [i for i in ids if i not in found]})
            case ["tasks", raw_id]:
                task_id = self._check(request, _task_id(raw_id))
                with_events = query.get("events", ["1"])[-1] not in ("0", "false", "no")
                task = store.task(task_id, with_events)
                return _json(200, task) if task is not None else _error(404, "no such task")
            case ["tasks", raw_id, "events"]:
                task_id = _task_id(raw_id)
                since = _int(query, "since", 0, 2**62)
                limit = _int(query, "limit", 1000, MAX_LIMIT)
                if limit == 0:
                    raise BadRequest("limit must be at least 1")
                events = store.events_since(self._check(request, task_id), since, limit)
                return _json(200, events) if events is not None else _error(404, "no such task")
            case ["tasks", raw_id, "page"]:
                task_id = self._check(request, _task_id(raw_id))
                if store.task(task_id, with_events=False) is None:
                    return _error(404, "no such task")
                nonce = new_nonce()
                html = render_page(task_id, nonce).encode()
                return Answer(200, "text/html; charset=utf-8", html, content_security_policy(nonce))
            case ["jobs", raw_jid]:
                if not JOB_ID.fullmatch(raw_jid):
                    raise BadRequest(f"malformed job id {raw_jid[:64]!r}")
                event = store.event(raw_jid)
                owner = event["task_id"] if event is not None else None
                if not self._allows(request, Resource("job", raw_jid, owner)):
                    raise Forbidden
                if event is None:
                    return _error(404, "no such job")
                if self.authorize is None:  # a task id grants reading the whole task: not from a jid alone
                    del event["task_id"]
                return _json(200, event)
            case ["batches", raw_bid]:
                if not BATCH_ID.fullmatch(raw_bid):
                    raise BadRequest(f"malformed batch id {raw_bid[:64]!r}")
                if not self._allows(request, Resource("batch", raw_bid, None)):
                    raise Forbidden
                batch = batch_status(raw_bid, self.tracker.config)
                return _json(200, batch.as_dict()) if batch is not None else _error(404, "no such batch")
            case ["workflows", raw_id]:
                if not BATCH_ID.fullmatch(raw_id):  # a workflow id has a bid's form
                    raise BadRequest(f"malformed workflow id {raw_id[:64]!r}")
                if not self._allows(request, Resource("workflow", raw_id, None)):
                    raise Forbidden
                flow = workflow_status(raw_id, self.tracker.config)
                return _json(200, flow.to_dict()) if flow is not None else _error(404, "no such workflow")
        return _error(404, "not found")


def asgi_app(
    tracker: Tracker | None = None, authorize: Authorize[StarletteRequest] | None = None
) -> Callable[..., Any]:
    """An ASGI 3 app serving the endpoints (database calls, and ``authorize``, run in a worker thread).

    ``authorize`` gets a ``starlette.requests.Request`` (Starlette must be installed to give one): mounted in a
    Starlette or FastAPI app, it carries the host app's ``request.session``, ``request.user`` and cookies."""
    endpoints: TrackingEndpoints[Any] = TrackingEndpoints(tracker, authorize)
    return serve_asgi(endpoints.answer, starlette_request=authorize is not None)


def wsgi_app(
    tracker: Tracker | None = None, authorize: Authorize[WSGIRequest] | None = None
) -> Callable[..., Iterable[bytes]]:
    """A WSGI app serving the endpoints; ``authorize`` gets a ``WSGIRequest`` (method, path, headers, environ)."""
    endpoints: TrackingEndpoints[WSGIRequest] = TrackingEndpoints(tracker, authorize)

    def native(environ: dict[str, Any]) -> WSGIRequest:
        return WSGIRequest.from_environ(environ, wsgi_path(environ))

    return serve_wsgi(endpoints.answer, native)
