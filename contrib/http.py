"""What kiq's HTTP apps (the tracking endpoints, the dashboard) share: an ``Answer``, the headers every answer
carries, the request as they see it under ASGI and WSGI, so each app is written once as ``Request -> Answer``, and
the ``Host`` check that a server of its own (``kiq web``) needs against DNS rebinding (``allowed_hosts_only``).
"""

from __future__ import annotations

import asyncio
import re
import socketserver
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

JSON_POLICY = "default-src 'none'; frame-ancestors 'none'"
SECURITY_HEADERS = (
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
)
REASONS = {
    200: "OK",
    303: "See Other",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
MAX_BODY = 1 << 20  # a form of the dashboard: a selection of entries, never a payload


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes
    policy: str = JSON_POLICY  # Content-Security-Policy
    headers: tuple[tuple[str, str], ...] = field(default=())  # more headers (e.g. Allow)

    def all_headers(self) -> list[tuple[str, str]]:
        """Every header of the answer, the security headers included (those the answer does not set itself)."""
        own = {name for name, _ in self.headers}  # the answer's own value replaces a default one
        security = [header for header in SECURITY_HEADERS if header[0] not in own]
        return [
            ("Content-Type", self.content_type),
            ("Content-Length", str(len(self.body))),
            ("Content-Security-Policy", self.policy),
            *security,
            *self.headers,
        ]

    @classmethod
    def text(cls, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Answer:
        """A plain-text answer (a refusal, a redirect's body)."""
        return cls(status, "text/plain; charset=utf-8", message.encode(), headers=headers)

    @property
    def status_line(self) -> str:
        return f"{self.status} {REASONS.get(self.status, 'Unknown')}"


TOO_LARGE = Answer.text(413, "request body too large")
# what a Host header may hold, its port removed: a DNS name or IPv4 address, or an IPv6 literal in brackets
HOST_NAME = re.compile(r"[a-z0-9.-]+|\[[a-f0-9:.]+\]")


@dataclass(frozen=True)
class WSGIRequest:
    """What the plain WSGI app gives ``authorize``: header names are lower case (``headers["authorization"]``)."""

    method: str
    path: str
    headers: Mapping[str, str]
    environ: dict[str, Any]

    @classmethod
    def from_environ(cls, environ: dict[str, Any], path: str) -> WSGIRequest:
        return cls(environ.get("REQUEST_METHOD", "GET"), path, wsgi_headers(environ), environ)


@dataclass(frozen=True)
class Request:
    """A request as an app sees it: ``path`` below the mount point, ``root`` the mount point as the browser sees
    it (to build links), ``native`` the framework's own request object (for an ``authorize`` hook), ``client`` the
    address of the peer that sent it (a proxy's, behind one; "" when the server does not say)."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    root: str = ""
    native: Any = None
    client: str = ""


def wsgi_headers(environ: Mapping[str, Any]) -> dict[str, str]:
    return {
        name.removeprefix("HTTP_").replace("_", "-").lower(): str(value)
        for name, value in environ.items()
        if name.startswith("HTTP_") or (name in ("CONTENT_TYPE", "CONTENT_LENGTH") and value)
    }


def wsgi_path(environ: Mapping[str, Any], key: str = "PATH_INFO") -> str:
    # PEP 3333: PATH_INFO and SCRIPT_NAME are latin-1-decoded bytes; recover the UTF-8 text
    return str(environ.get(key, "")).encode("latin-1").decode("utf-8", "replace")


def read_wsgi_body(environ: Mapping[str, Any]) -> bytes | None:
    """The request body, or None when it is larger than ``MAX_BODY``."""
    raw = str(environ.get("CONTENT_LENGTH") or "0")
    length = int(raw) if raw.isdigit() else 0
    if length > MAX_BODY:
        return None
    return environ["wsgi.input"].read(length) if length else b""


def serve_wsgi(
    handle: Callable[[Request], Answer], native: Callable[[dict[str, Any]], Any] | None = None
) -> Callable[..., Iterable[bytes]]:
    """A WSGI app answering with ``handle``; ``native(environ)`` makes the request's ``native`` object."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        body = read_wsgi_body(environ)
        if body is None:
            answer = TOO_LARGE
        else:
            answer = handle(Request(
                method, wsgi_path(environ), environ.get("QUERY_STRING", ""), wsgi_headers(environ), body,
                wsgi_path(environ, "SCRIPT_NAME"), native(environ) if native is not None else None,
                str(environ.get("REMOTE_ADDR") or ""),
            ))  # fmt: skip
        start_response(answer.status_line, answer.all_headers())
        return [b"" if method == "HEAD" else answer.body]

    return app


def serve_asgi(handle: Callable[[Request], Answer], starlette_request: bool = False) -> Callable[..., Any]:
    """An ASGI 3 app answering with ``handle``, run in a worker thread (it blocks on Redis or a database); with
    ``starlette_request``, the request's ``native`` is Starlette's ``Request`` (so an ``authorize`` hook sees the
    host app's ``request.user`` and session; Starlette is imported only then)."""
    native: Callable[..., Any] | None = None
    if starlette_request:
        from starlette.requests import Request as StarletteRequest

        native = StarletteRequest

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
        body = await _read_asgi_body(receive)
        if body is None:
            answer = TOO_LARGE
        else:
            headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
            request = Request(
                scope["method"],
                path,
                scope.get("query_string", b"").decode("latin-1"),
                headers,
                body,
                root,
                native(scope, _replay(body)) if native is not None else None,
                str((scope.get("client") or ("",))[0] or ""),
            )
            answer = await asyncio.to_thread(handle, request)
        await send({"type": "http.response.start", "status": answer.status, "headers": [
            (name.lower().encode(), value.encode()) for name, value in answer.all_headers()
        ]})  # fmt: skip
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else answer.body})

    return app


async def _read_asgi_body(receive: Callable[..., Any]) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes) -> Callable[..., Any]:
    """A ``receive`` that gives the body already read (for a framework request made after reading it)."""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def host_name(header: str) -> str | None:
    """The host of a ``Host`` header, lower case, without its port or a trailing dot; None when it is malformed."""
    host = header.strip().lower()
    if not host.endswith("]"):  # "name:port", "[::1]:port"; a bare "[::1]" has no port to remove
        name, colon, port = host.rpartition(":")
        if colon and (port.isdigit() or not port):
            host = name
    host = host.removesuffix(".")
    return host if HOST_NAME.fullmatch(host) else None


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    """Django's ``ALLOWED_HOSTS`` rule: an entry matches that host exactly, ``.example.com`` matches example.com
    and its subdomains, ``*`` matches any host (ports are not compared)."""
    for entry in allowed:
        entry = entry.lower()
        if entry == "*" or entry == host or (entry.startswith(".") and (host.endswith(entry) or host == entry[1:])):
            return True
    return False


def _names_allowed_host(header: str, allowed: tuple[str, ...]) -> bool:
    """Whether a ``Host`` header is well formed and names an ``allowed`` host."""
    host = host_name(header)
    return host is not None and host_allowed(host, allowed)


def allowed_hosts_only(handle: Callable[[Request], Answer], allowed: Iterable[str]) -> Callable[[Request], Answer]:
    """``handle`` for requests whose ``Host`` header names an ``allowed`` host (see ``host_allowed``); any other
    request, or one without a ``Host``, is answered 400 before ``handle`` sees it. A page of another site whose name
    an attacker points at 127.0.0.1 (DNS rebinding) is same-origin for the browser, but its requests carry that
    name as their ``Host``."""
    hosts = tuple(allowed)

    def check(request: Request) -> Answer:
        if _names_allowed_host(request.headers.get("host", ""), hosts):
            return handle(request)
        named = request.headers.get("host", "")[:100]
        return Answer.text(400, f"Host {named!r} is not an allowed host of this server (see --allowed-host)")

    return check


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # a line per request is noise for these apps
        pass


def wsgi_server(app: Callable[..., Any], host: str = "127.0.0.1", port: int = 0) -> WSGIServer:
    """``app`` on the standard library's WSGI server, a thread per request, no line logged per request: bound,
    not yet serving (``serve_forever``). Port 0: any free port (``server.server_port`` says which)."""
    return make_server(host, port, app, _ThreadingServer, _QuietHandler)


def wsgi_allowed_hosts_only(app: Callable[..., Any], allowed: Iterable[str]) -> Callable[..., Any]:
    """``allowed_hosts_only`` for a WSGI ``app``: a request whose ``Host`` is not an ``allowed`` host gets 400."""
    hosts = tuple(allowed)

    def check(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if _names_allowed_host(environ.get("HTTP_HOST", ""), hosts):
            return app(environ, start_response)
        start_response("400 Bad Request", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not an allowed host of this server\n"]

    return check


def serve_in_background(
    app: Callable[..., Any], host: str = "127.0.0.1", port: int = 0, allowed_hosts: Iterable[str] | None = None
) -> WSGIServer:
    """``wsgi_server`` serving from a daemon thread; ``server.shutdown()`` stops it. With ``allowed_hosts``, only
    requests for those hosts are served (DNS rebinding: see ``allowed_hosts_only``)."""
    if allowed_hosts is not None:
        app = wsgi_allowed_hosts_only(app, allowed_hosts)
    server = wsgi_server(app, host, port)
    threading.Thread(target=server.serve_forever, name="kiq-http", daemon=True).start()
    return server
