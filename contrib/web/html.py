"""HTML built from Python values, escaped by construction: ``el("td", value)`` escapes ``value`` unless it is
``Markup`` (what ``el`` itself returns). Everything read from Redis is user data (job arguments, error messages,
class names written by any producer); no page writes a string into markup any other way.
"""

from __future__ import annotations

import datetime
import html
import json
import math
from collections.abc import Iterable, Mapping
from urllib.parse import urlencode


class Markup(str):
    """Text that is already HTML."""


Node = Markup | str | int | float | None | Iterable["Node"]
VOID = frozenset({"br", "hr", "img", "input", "link", "meta"})


def escape(value: object) -> Markup:
    """``value`` as HTML text: Markup as it is, numbers formatted, None as nothing, the rest escaped (lone
    surrogates and NUL, possible in payloads, shown as escapes instead of breaking the page's encoding)."""
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup()
    if isinstance(value, bool):
        return Markup("yes" if value else "no")
    if isinstance(value, int | float):
        return Markup(number(value))
    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8").replace("\0", "\\x00")
    return Markup(html.escape(text, quote=True))


def render(node: Node) -> Markup:
    if isinstance(node, str | int | float) or node is None:
        return escape(node)
    return Markup("".join(render(child) for child in node))


def el(tag: str, *children: Node, **attrs: str | int | float | bool | None) -> Markup:
    """``<tag attrs>children</tag>``; an attribute ``class_`` is ``class``, ``data_x`` is ``data-x``; False or
    None leaves the attribute out, True writes it bare."""
    parts = [tag]
    for name, value in attrs.items():
        if value is None or value is False:
            continue
        name = name.rstrip("_").replace("_", "-")
        parts.append(name if value is True else f'{name}="{escape(value)}"')
    opening = f"<{' '.join(parts)}>"
    if tag in VOID:
        return Markup(opening)
    return Markup(f"{opening}{render(children)}</{tag}>")


def number(value: int | float) -> str:
    """1234567 -> "1,234,567"; a float with at most two decimals; NaN and infinities as words."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:,.2f}".rstrip("0").rstrip(".") if value % 1 else f"{int(value):,}"
    return f"{value:,}"


def when(epoch: float | None) -> Markup:
    """A moment in UTC with its zone; the page's script shows it in the reader's zone (and how long ago)."""
    if epoch is None or not math.isfinite(epoch) or not -1e11 < epoch < 1e11:
        return Markup("–")
    moment = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    return el("time", moment.strftime("%Y-%m-%d %H:%M:%S UTC"), datetime=moment.isoformat(), data_epoch=repr(epoch))


def duration(seconds: float) -> str:
    """A length of time, short: "45 s", "3 min", "2 h 5 min", "3 d 4 h"."""
    if not math.isfinite(seconds):
        return "–"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def megabytes(kilobytes: int | float) -> str:
    return f"{kilobytes / 1024:,.1f} MB"


def href(path: str, query: Mapping[str, str | int] | None = None) -> str:
    return f"{path}?{urlencode(query)}" if query else path


def link(text: Node, url: str, **attrs: str | bool | None) -> Markup:
    return el("a", text, href=url, **attrs)


def table(columns: Iterable[Node], rows: Iterable[Iterable[Node]], empty: str, **attrs: str) -> Markup:
    """A table; ``empty`` is said instead when there are no rows."""
    body = [el("tr", [el("td", cell) for cell in row]) for row in rows]
    if not body:
        return el("p", empty, class_="empty")
    head = el("thead", el("tr", [el("th", column) for column in columns]))
    return el("table", head, el("tbody", body), **attrs)


def facts(items: Iterable[tuple[str, Node]]) -> Markup:
    return el("dl", [[el("dt", label), el("dd", value)] for label, value in items], class_="facts")


def pager(path: str, query: Mapping[str, str], page: int, more: bool) -> Markup:
    """Previous/next links keeping the other query parameters."""

    def to(number: int) -> str:
        return href(path, {**query, "page": str(number)})

    previous = link("‹ Previous", to(page - 1), rel="prev") if page > 1 else el("span", "‹ Previous", class_="off")
    following = link("Next ›", to(page + 1), rel="next") if more else el("span", "Next ›", class_="off")
    return el("nav", previous, el("span", f"page {page:,}"), following, class_="pager")


def pretty(value: object) -> str:
    """JSON for people: indented, non-ASCII kept, anything JSON cannot say as its repr."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=repr)
