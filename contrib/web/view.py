"""One request as the pages see it (``View``), what a page answers (``Page``), and the page layout around it."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote

from kiq import __version__

from .html import Markup, Node, el, href, link, when

if TYPE_CHECKING:
    import kiq
    from kiq.api import JobRecord

    from ..http import Request

CSRF_COOKIE = "kiq_csrf"
CSRF_FIELD = "csrf"
PATH_SAFE = "/:@!$&'()*+,;="  # what a path segment may hold as it is (RFC 3986 pchar); the rest is escaped
NAVIGATION = (
    ("", "Dashboard"),
    ("busy", "Busy"),
    ("queues", "Queues"),
    ("retries", "Retries"),
    ("scheduled", "Scheduled"),
    ("dead", "Dead"),
    ("metrics", "Metrics"),
)


class NotFound(Exception):
    """The page or the entry asked for does not exist (answered 404)."""


class Refused(Exception):
    """A request the dashboard will not carry out: a bad form, an action on nothing (answered 400)."""


@dataclass
class Page:
    title: str
    body: Markup
    status: int = 200
    section: str = ""  # the navigation entry to mark as current


@dataclass
class View:
    """A request with what pages need: the query and form values, the CSRF token, links under the mount point."""

    request: Request
    config: kiq.Config
    read_only: bool
    tabs: Sequence[tuple[str, str]] = ()  # (name, title) of the plugins' tabs, for the navigation
    csrf: str = field(init=False)  # the request's cookie token, or a new one
    new_csrf: bool = field(init=False)  # the token was made for this request: the answer sets its cookie

    def __post_init__(self) -> None:
        self.query: dict[str, str] = {
            name: values[-1]
            for name, values in parse_qs(self.request.query, keep_blank_values=True, max_num_fields=50).items()
        }
        token = cookies(self.request.headers.get("cookie", "")).get(CSRF_COOKIE, "")
        self.new_csrf = len(token) != 43 or not token.replace("-", "").replace("_", "").isalnum()
        self.csrf = secrets.token_urlsafe(32) if self.new_csrf else token

    def url(self, path: str = "", query: Mapping[str, str | int] | None = None) -> str:
        """An absolute link to ``path`` under the dashboard's mount point, percent-encoded: names from Redis in it
        (queues, jids, job classes) may hold ``?``, ``#``, ``%``, spaces or control characters."""
        return href(quote(f"{self.request.root}/{path}", safe=PATH_SAFE, errors="surrogatepass"), query)

    def number_param(self, name: str, default: int, maximum: int) -> int:
        raw = self.query.get(name, "")
        return min(int(raw), maximum) if raw.isdigit() and 0 < len(raw) < 10 and int(raw) > 0 else default

    def action(
        self,
        path: str,
        label: str,
        fields: Mapping[str, str] | None = None,
        confirm: str | None = None,
        danger: bool = False,
        form: str | None = None,
    ) -> Markup:
        """A button that POSTs ``fields`` to ``path`` (with the CSRF token); nothing in read-only mode. With
        ``form``, the button submits that form (whose checkboxes select entries) with its own ``action``."""
        if self.read_only:
            return Markup()
        button = el(
            "button",
            label,
            type="submit",
            name="action" if form else None,
            value=action_name(label) if form else None,
            form=form,
            class_="danger" if danger else None,
            data_confirm=confirm,
        )
        if form:
            return button
        hidden = [el("input", type="hidden", name=name, value=value) for name, value in (fields or {}).items()]
        return el(
            "form",
            el("input", type="hidden", name=CSRF_FIELD, value=self.csrf),
            hidden,
            button,
            method="post",
            action=self.url(path),
            class_="inline",
        )

    def selection_form(self, form_id: str, path: str) -> Markup:
        """An empty form the page's checkboxes and bulk buttons belong to (``form=`` attributes)."""
        if self.read_only:
            return Markup()
        token = el("input", type="hidden", name=CSRF_FIELD, value=self.csrf)
        return el("form", token, id=form_id, method="post", action=self.url(path))


def action_name(label: str) -> str:
    """What a button labelled ``label`` posts as its action: "Retry now" -> "retry_now"."""
    return label.lower().replace(" ", "_")


def cookies(header: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name and name not in found:
            found[name] = value
    return found


def layout(view: View, page: Page, banner: str | None = None) -> Markup:
    sections = [*NAVIGATION, *((f"tabs/{name}", title) for name, title in view.tabs)]
    nav = [
        link(title, view.url(path), aria_current="page" if path == page.section else None) for path, title in sections
    ]
    mode = el("span", "read-only", class_="badge") if view.read_only else Markup()
    header = el(
        "header",
        el("a", "kiq", href=view.url(), class_="brand"),
        el("nav", nav),
        mode,
        el("span", f"kiq {__version__}", class_="version"),
    )
    alert: Node = el("div", banner, class_="banner", role="alert") if banner else None
    main = el("main", alert, el("h1", page.title), page.body)
    head = el(
        "head",
        el("meta", charset="utf-8"),
        el("meta", name="viewport", content="width=device-width, initial-scale=1"),
        el("link", rel="icon", href="data:,"),  # no favicon request
        el("title", f"{page.title} · kiq"),
        el("link", rel="stylesheet", href=view.url("static/kiq.css")),
        el("script", src=view.url("static/kiq.js"), defer=True),
    )
    return Markup("<!doctype html>" + el("html", head, el("body", header, main), lang="en"))


def shown(value: object) -> str:
    """A value from a payload in a table cell: strings as they are, anything else as compact JSON. Text, not
    markup: ``el`` escapes it, after ``truncated`` cut it (cutting escaped text would escape it twice)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=repr)


def truncated(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def payload_time(record: JobRecord, field: str, seconds: float | None) -> Node:
    """A payload time (``seconds``, as the API read it: Sidekiq 8's integer ms or float seconds) as a date; a stored
    value that is no time at all (another producer's string, a bool...) shown as stored, saying so."""
    problem = record.unreadable_time(field)
    return el("span", problem, class_="error") if problem else when(seconds)


def arguments(args: list[Any], kwargs: dict[str, Any]) -> Markup:
    """A job's arguments in a table cell: its ``args``, then its ``kwargs`` when it has some, each cut on its own
    (long positional arguments do not hide the keyword ones)."""
    cell = el("code", truncated(shown(args)))
    if not kwargs:
        return cell
    return Markup(cell + " " + el("code", truncated(shown(kwargs)), class_="kwargs"))
