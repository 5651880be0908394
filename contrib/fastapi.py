"""Mount the tracking endpoints in a FastAPI or Starlette app: ``mount_tracking(app, "/tracking")``."""

from __future__ import annotations

from typing import Any

from kiq.plugins.tracking import Tracker

from .tracking_http import asgi_app


def mount_tracking(app: Any, prefix: str = "/tracking", tracker: Tracker | None = None) -> None:
    """Serve ``GET <prefix>/tasks/<id>`` etc. from ``app`` (anything with Starlette's ``mount``)."""
    app.mount(prefix, asgi_app(tracker))
