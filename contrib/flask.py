"""Mount the tracking endpoints or the dashboard in a Flask app: ``mount_tracking(app, "/tracking")``,
``mount_web(app, "/kiq", authorize=staff_only)``.

The endpoints are real Flask routes (a blueprint), so the app's ``before_request`` functions, its session and
extensions such as Flask-Login run for them, and ``authorize(request, resource)`` gets ``flask.request``
inside the request context (``flask.g``, ``flask.session`` and ``current_user`` work there too).
"""

from __future__ import annotations

import re
from typing import Any

import flask

import kiq
from kiq.plugins.tracking import Tracker

from .http import Request
from .tracking_http import Authorize, TrackingEndpoints
from .web import Authorize as WebAuthorize
from .web import Dashboard

# every method reaches the view, which answers 405 with its own headers to all but GET and HEAD
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def mount_tracking(
    app: flask.Flask,
    prefix: str = "/tracking",
    tracker: Tracker | None = None,
    authorize: Authorize[flask.Request] | None = None,
) -> None:
    """Serve ``GET <prefix>/tasks/<id>`` etc. as routes of ``app``, next to its own."""
    endpoints: TrackingEndpoints[flask.Request] = TrackingEndpoints(tracker, authorize)

    def tracking(subpath: str = "") -> flask.Response:
        request: flask.Request = flask.request._get_current_object()  # type: ignore[attr-defined]  # not the proxy
        answer = endpoints.handle(request.method, "/" + subpath, request.query_string.decode("latin-1"), request)
        return flask.Response(answer.body, answer.status, answer.all_headers())

    _register(app, "kiq_tracking", prefix, tracking)


def mount_web(
    app: flask.Flask,
    prefix: str = "/kiq",
    config: kiq.Config | None = None,
    read_only: bool = False,
    authorize: WebAuthorize | None = None,
) -> None:
    """Serve the dashboard under ``prefix`` as routes of ``app``; ``authorize(request)`` gets ``request.native``
    = ``flask.request`` inside the request context (``flask.session``, ``current_user`` work there)."""
    dashboard = Dashboard(config, read_only, authorize)
    root = prefix.rstrip("/")

    def web(subpath: str = "") -> flask.Response:
        request: flask.Request = flask.request._get_current_object()  # type: ignore[attr-defined]  # not the proxy
        headers = {name.lower(): value for name, value in request.headers.items()}
        answer = dashboard(Request(
            request.method, "/" + subpath, request.query_string.decode("latin-1"), headers,
            request.get_data(cache=False), request.script_root + root, request, request.remote_addr or "",
        ))  # fmt: skip
        return flask.Response(answer.body, answer.status, answer.all_headers())

    _register(app, "kiq_web", prefix, web)


def _register(app: flask.Flask, kind: str, prefix: str, view: Any) -> None:
    name = kind + re.sub(r"\W", "_", prefix)  # one blueprint per prefix: mounting twice works
    blueprint = flask.Blueprint(name, __name__, url_prefix=prefix.rstrip("/") or None)
    options: dict[str, Any] = {"methods": METHODS, "provide_automatic_options": False}
    blueprint.add_url_rule("/", view_func=view, **options)
    blueprint.add_url_rule("/<path:subpath>", view_func=view, **options)
    app.register_blueprint(blueprint)
