"""Mount the tracking endpoints in a Flask app: ``mount_tracking(app, "/tracking")``."""

from __future__ import annotations

from typing import Any

from werkzeug.middleware.dispatcher import DispatcherMiddleware

from kiq.plugins.tracking import Tracker

from .tracking_http import wsgi_app


def mount_tracking(app: Any, prefix: str = "/tracking", tracker: Tracker | None = None) -> None:
    """Serve ``GET <prefix>/tasks/<id>`` etc. next to ``app``'s own routes (a Flask app)."""
    app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {prefix: wsgi_app(tracker)})
