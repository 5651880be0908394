"""kiq's web dashboard: queues, busy processes, retries, scheduled and dead jobs, metrics, and the plugins' tabs.

    from kiq.contrib.web import asgi_app, wsgi_app
    app = asgi_app(config, read_only=False, authorize=None)   # any ASGI server, or mount it in Starlette/FastAPI
    app = wsgi_app(config)                                    # any WSGI server

``kiq web`` serves it alone (loopback by default); ``kiq.contrib.fastapi.mount_web`` (FastAPI and Starlette),
``kiq.contrib.flask.mount_web`` and ``kiq.contrib.django`` mount it in an app, behind that app's own
authentication.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..http import Request, serve_asgi, serve_wsgi
from .app import Authorize, Dashboard

if TYPE_CHECKING:
    import kiq

__all__ = ["Authorize", "Dashboard", "Request", "asgi_app", "wsgi_app"]


def asgi_app(
    config: kiq.Config | None = None, read_only: bool = False, authorize: Authorize | None = None
) -> Callable[..., Any]:
    """The dashboard as an ASGI 3 app (pages are made in a worker thread: they read Redis). With ``authorize``,
    ``request.native`` is Starlette's ``Request`` (so the host app's ``request.user`` and session reach the hook)."""
    return serve_asgi(Dashboard(config, read_only, authorize), starlette_request=authorize is not None)


def wsgi_app(
    config: kiq.Config | None = None, read_only: bool = False, authorize: Authorize | None = None
) -> Callable[..., Iterable[bytes]]:
    """The dashboard as a WSGI app; ``authorize`` gets the request with ``native`` = the WSGI environ."""
    return serve_wsgi(Dashboard(config, read_only, authorize), lambda environ: environ)
