"""Mount the tracking endpoints in a FastAPI or Starlette app: ``mount_tracking(app, "/tracking")``.

With ``authorize=`` the hook gets Starlette's ``Request`` of the host app, so what its middleware set is there:
``request.user`` (``AuthenticationMiddleware``), ``request.session`` (``SessionMiddleware``), cookies, headers.
FastAPI dependencies do not run for a mounted app: put the authentication in a middleware, or read the session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kiq.plugins.tracking import Tracker

from .tracking_http import Authorize, asgi_app

if TYPE_CHECKING:
    from starlette.requests import Request


def mount_tracking(
    app: Any, prefix: str = "/tracking", tracker: Tracker | None = None, authorize: Authorize[Request] | None = None
) -> None:
    """Serve ``GET <prefix>/tasks/<id>`` etc. from ``app`` (anything with Starlette's ``mount``)."""
    app.mount(prefix, asgi_app(tracker, authorize))
