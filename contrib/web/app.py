"""The dashboard as one ``Request -> Answer`` function (``Dashboard``), served under ASGI or WSGI by
``kiq.contrib.http``, mounted by the framework adapters, or run by ``kiq web``.

Security, in one place: every answer carries a Content-Security-Policy that allows only the dashboard's own script
and style (no inline code); every state-changing action is a POST carrying the CSRF token of a ``SameSite=Strict``
cookie (double submit) from the dashboard's own origin; ``read_only`` hides the buttons and refuses every POST;
``authorize(request)`` decides who may see the dashboard at all. Values from Redis are escaped by ``html.el``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

import redis

import kiq
from kiq.tabs import Document

from ..http import Answer, Request
from . import busy, iteration, metrics, overview, queues, sets
from .html import el
from .tabs import plugin_tabs, tab_page
from .view import CSRF_COOKIE, CSRF_FIELD, NotFound, Page, Refused, View, action_name, layout

if TYPE_CHECKING:
    from kiq.tabs import Tab

log = logging.getLogger("kiq.web")

PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
# a plugin's Document served as HTML (kiq.tabs): its inline scripts run sandboxed in an opaque origin (no cookie, no
# access to the dashboard), and nothing may load from the network: what a self-contained viewer needs, no more
DOCUMENT_POLICY = (
    "sandbox allow-scripts; default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline' data:; img-src data:; font-src data:; frame-ancestors 'none'; base-uri 'none'"
)
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
# authorize(request) -> True to serve; anything else (False, an exception) answers 403. ``request.native`` is the
# host framework's request when the dashboard is mounted (its session and user), else None.
Authorize = Callable[[Request], bool]


class Dashboard:
    """The dashboard of ``config`` (default: the process-wide config): call it with a ``Request``."""

    def __init__(
        self, config: kiq.Config | None = None, read_only: bool = False, authorize: Authorize | None = None
    ) -> None:
        self.config = config or kiq.default_config()
        self.read_only = read_only
        self.authorize = authorize
        self.proxies = TrustedProxies(self.config.trusted_proxies)
        self.tabs: dict[str, Tab] = plugin_tabs(self.config)
        self._static: dict[str, bytes] = {}
        self._scrapes: Callable[[str | None], tuple[bytes, str]] | None = None  # made at the first scrape

    def __call__(self, request: Request) -> Answer:
        if request.method not in ("GET", "HEAD", "POST"):
            return Answer.text(405, "method not allowed", headers=(("Allow", "GET, HEAD, POST"),))
        if not self._allows(request):
            return Answer.text(403, "not allowed")
        inner = request.path.strip("/")
        parts = inner.split("/") if inner else []  # "//" inside stays: a jid, a queue or a class may hold it
        if parts[:1] == ["static"] and request.method != "POST":
            return self._asset("/".join(parts[1:]))
        view = View(request, self.config, self.read_only, [(tab.name, tab.title) for tab in self.tabs.values()])
        try:
            if request.method == "POST":
                return self._post(view, parts)
            return self._get(view, parts)
        except NotFound as exc:
            return self._page(view, Page("Not found", el("p", str(exc)), 404))
        except (Refused, kiq.KiqError) as exc:
            return self._page(view, Page("Not done", el("p", str(exc)), 400))
        except redis.RedisError as exc:
            log.warning("dashboard: Redis failed for %s: %s", request.path, exc)
            banner = f"Redis is unavailable ({type(exc).__name__}: {exc}). The page shows again once it answers."
            return self._page(view, Page("Redis is unavailable", el("p", "Nothing to show."), 503), banner)
        except Exception as exc:
            log.exception("dashboard: %s failed", request.path)
            banner = f"This page failed: {type(exc).__name__}: {exc}"
            return self._page(view, Page("Error", el("p", "See the server's log."), 500), banner)

    def _allows(self, request: Request) -> bool:
        if self.authorize is None:
            return True
        try:
            allowed = self.authorize(request)
        except Exception:
            log.exception("dashboard: the authorize hook raised; answering 403")
            return False
        return allowed is True

    def _get(self, view: View, parts: list[str]) -> Answer:
        match parts:
            case []:
                page = overview.overview(view)
            case ["stats.json"]:
                body = json.dumps(overview.live_stats(view), separators=(",", ":")).encode()
                return Answer(200, "application/json", body)
            case ["busy"]:
                page = busy.busy(view)
            case ["queues"]:
                page = queues.queues(view)
            case ["queues", *name] if name:
                page = queues.queue_page(view, "/".join(name))
            case [kind] if kind in sets.SETS:
                page = sets.set_page(view, sets.SETS[kind])
            case [kind, *key] if kind in sets.SETS and key:
                page = sets.job_page(view, sets.SETS[kind], "/".join(key))
            case ["metrics"] if metrics.wants_metrics(view.request.headers.get("accept")):
                return self._scrape(view.request)
            case ["metrics"]:
                page = metrics.metrics_page(view)
            case ["metrics", *name] if name:
                page = metrics.job_class_page(view, "/".join(name))
            case ["tabs", name, *rest] if name in self.tabs:
                shown = tab_page(view, self.tabs[name], "/".join(rest))
                if isinstance(shown, Document):
                    return document_answer(shown)
                page = shown
            case _:
                raise NotFound("no such page")
        return self._page(view, page)

    def _scrape(self, request: Request) -> Answer:
        """``/metrics`` for a Prometheus scraper: the fleet's gauges (kiq.plugins.metrics.exposition); a browser
        gets the Metrics page at the same address."""
        if self._scrapes is None:
            try:
                self._scrapes = metrics.fleet_exposition(self.config)
            except ImportError:
                return Answer.text(501, "/metrics needs prometheus_client: pip install 'kiq[metrics]'")
        body, content_type = self._scrapes(request.headers.get("accept"))
        return Answer(200, content_type, body)

    def _post(self, view: View, parts: list[str]) -> Answer:
        if self.read_only:
            return Answer.text(403, "the dashboard is read-only")
        request = view.request
        form = parse_qs(request.body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=2000)
        token = (form.get(CSRF_FIELD) or [""])[-1]
        valid = not view.new_csrf and hmac.compare_digest(token.encode(), view.csrf.encode())
        if not valid or not same_origin(request, self.proxies):
            return Answer.text(403, "missing or wrong CSRF token: reload the page and retry")
        single = {name: values[-1] for name, values in form.items()}
        match parts:
            case ["busy"]:
                target = busy.signal(view, single)
            case ["cancel"]:
                target = iteration.cancel(view, single)
            case ["queues", *name] if name:
                target = queues.act_on_queue(view, "/".join(name), single)
            case [kind] if kind in sets.SETS:
                target = sets.act(view, sets.SETS[kind], single.get("action", ""), form.get("key", []))
            case [kind, *key] if kind in sets.SETS and key:
                action = action_name(single.get("op", ""))
                target = sets.act(view, sets.SETS[kind], action, ["/".join(key)])
            case _:
                raise NotFound("no such action")
        return Answer.text(303, "", headers=(("Location", view.url(target)),))

    def _page(self, view: View, page: Page, banner: str | None = None) -> Answer:
        # same-origin, not no-referrer: with no-referrer a browser sends "Origin: null" with the page's forms
        headers: tuple[tuple[str, str], ...] = (("Referrer-Policy", "same-origin"),)
        if view.new_csrf:
            path = view.request.root or "/"
            headers += (("Set-Cookie", f"{CSRF_COOKIE}={view.csrf}; Path={path}; HttpOnly; SameSite=Strict"),)
        body = layout(view, page, banner).encode()
        return Answer(page.status, "text/html; charset=utf-8", body, PAGE_POLICY, headers)

    def _asset(self, name: str) -> Answer:
        suffix = name[name.rfind(".") :] if "." in name else ""
        if "/" in name or suffix not in STATIC_TYPES:
            return Answer.text(404, "not found")
        body = self._static.get(name)
        if body is None:
            try:
                body = resources.files(__package__).joinpath("static", name).read_bytes()
            except OSError:
                return Answer.text(404, "not found")
            self._static[name] = body
        return Answer(200, STATIC_TYPES[suffix], body, headers=(("Cache-Control", "max-age=300"),))


def document_answer(document: Document) -> Answer:
    """A tab's ``Document`` as it is: HTML shown sandboxed (DOCUMENT_POLICY), anything else saved as a file."""
    headers: list[tuple[str, str]] = [("Referrer-Policy", "no-referrer")]
    if document.filename is not None:
        name = "".join(c if c.isalnum() or c in "._-" else "_" for c in document.filename)[:120] or "download"
        headers.append(("Content-Disposition", f'attachment; filename="{name}"'))
    if document.content_encoding is not None:
        headers.append(("Content-Encoding", document.content_encoding))
    html = document.content_type.split(";")[0].strip().lower() == "text/html"
    policy = DOCUMENT_POLICY if html else "default-src 'none'; frame-ancestors 'none'; sandbox"
    return Answer(200, document.content_type, document.body, policy, tuple(headers))


def same_origin(request: Request, proxies: TrustedProxies) -> bool:
    """False when the browser says the form came from another site (``Origin``); True when it says nothing. The
    dashboard's own host is ``Host``, or ``X-Forwarded-Host`` only when the peer is a trusted proxy: a client can
    send that header too, and a proxy that passes it on would otherwise let any ``Origin`` name itself."""
    origin = request.headers.get("origin")
    if not origin:
        return True
    host = request.headers.get("host", "")
    if proxies.trusts(request.client):
        host = request.headers.get("x-forwarded-host", "").split(",")[0].strip() or host
    return urlsplit(origin).netloc == host


class TrustedProxies:
    """The ``trusted_proxies`` setting: the addresses (or networks, ``10.0.0.0/8``) of the reverse proxies whose
    ``X-Forwarded-*`` headers the dashboard believes. Empty (the default): it believes none."""

    def __init__(self, entries: list[str]) -> None:
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for entry in entries:
            try:
                self.networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                raise kiq.ConfigError(
                    f"trusted_proxies: {entry!r:.80} is not an IP address or network (e.g. 10.0.0.7 or 10.0.0.0/8)"
                ) from None

    def trusts(self, client: str) -> bool:
        if not self.networks or not client:
            return False
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return False
        return any(address in network for network in self.networks)
