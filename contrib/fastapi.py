"""Mount the tracking endpoints or the dashboard in a FastAPI or Starlette app: ``mount_tracking(app,
"/tracking")``, ``mount_web(app, "/kiq", authorize=staff_only)``.

With ``authorize=`` the hook gets Starlette's ``Request`` of the host app, so what its middleware set is there:
``request.user`` (``AuthenticationMiddleware``), ``request.session`` (``SessionMiddleware``), cookies, headers.
FastAPI dependencies do not run for a mounted app: put the authentication in a middleware, or read the session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import kiq
from kiq.plugins.tracking import Tracker

from .tracking_http import Authorize, asgi_app
from .web import Authorize as WebAuthorize
from .web import asgi_app as web_asgi_app

if TYPE_CHECKING:
    from starlette.requests import Request


def mount_tracking(
    app: Any, prefix: str = "/tracking", tracker: Tracker | None = None, authorize: Authorize[Request] | None = None
) -> None:
    """Serve ``GET <prefix>/tasks/<id>`` etc. from ``app`` (anything with Starlette's ``mount``)."""
    app.mount(prefix, asgi_app(tracker, authorize))


def mount_web(
    app: Any,
    prefix: str = "/kiq",
    config: kiq.Config | None = None,
    read_only: bool = False,
    authorize: WebAuthorize | None = None,
) -> None:
    """Serve the dashboard under ``prefix``. ``authorize(request)`` decides who sees it: ``request.native`` is
    Starlette's ``Request``, with what the host app's middleware set (``.user``, ``.session``). Without it the
    dashboard is open to whoever reaches the app: give one unless the app is private."""
    app.mount(prefix, web_asgi_app(config, read_only, authorize))
