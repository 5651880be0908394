"""What a plugin adds to the web dashboard (``kiq.contrib.web``): tabs, contributed with the ``kiq_web_tabs`` hook.

A tab answers a request with a ``TabView``: data, not HTML. The dashboard renders it with its own layout and
escapes every string, so a plugin cannot write markup (or a script) into the page by mistake, and a tab looks like
the built-in pages::

    class MyPlugin:
        @kiq.hookimpl
        def kiq_web_tabs(self, config):
            return [Tab("locks", "Locks", lambda request: TabView("Locks", [Table(["Key", "TTL"], rows(config))]))]

The tab is served at ``<dashboard>/tabs/<name>/<path>``; ``TabRequest.path`` is the part after the name, and
``Link("text", "sub/path", {"page": "2"})`` links inside the tab. A render that raises ``LookupError`` answers 404;
any other exception is logged and shown as an error in that tab alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Config

TAB_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")


@dataclass(frozen=True)
class Link:
    """A link to ``path`` inside the same tab (with ``query`` parameters)."""

    text: str
    path: str = ""
    query: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class When:
    """A moment (epoch seconds), shown in the reader's time zone with that zone's name."""

    epoch: float | None


Cell = str | int | float | None | Link | When


@dataclass(frozen=True)
class Heading:
    text: str


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Code:
    """Preformatted text (a payload, a backtrace)."""

    text: str


@dataclass(frozen=True)
class Facts:
    """Label/value pairs, as a two-column list."""

    items: Sequence[tuple[str, Cell]]


@dataclass(frozen=True)
class Table:
    columns: Sequence[str]
    rows: Sequence[Sequence[Cell]]
    empty: str = "Nothing here."


@dataclass(frozen=True)
class Pager:
    """Previous/next links for a paged table: ``page`` counts from 1; ``more`` says whether a next page exists."""

    page: int
    more: bool


@dataclass(frozen=True)
class Search:
    """A search box that reloads the page with its text in the query parameter ``name`` (the other parameters kept,
    the page reset to 1)."""

    name: str = "q"
    placeholder: str = ""


Block = Heading | Text | Code | Facts | Table | Pager | Search


@dataclass(frozen=True)
class TabView:
    title: str
    blocks: Sequence[Block]


@dataclass(frozen=True)
class TabRequest:
    """One request to a tab: ``path`` after the tab's name ("" for its first page), the query string's values."""

    path: str
    query: Mapping[str, str]
    config: Config

    @property
    def page(self) -> int:
        """The ``page`` query parameter, 1 when absent or malformed."""
        raw = self.query.get("page", "1")
        return int(raw) if raw.isdigit() and 0 < len(raw) < 7 and int(raw) > 0 else 1


@dataclass(frozen=True)
class Tab:
    """A dashboard tab: ``name`` is its URL segment (lower-case letters, digits and dashes), ``title`` its label in
    the navigation, ``render`` answers each request (called in a worker thread: it may block on a database)."""

    name: str
    title: str
    render: Callable[[TabRequest], TabView]

    def __post_init__(self) -> None:
        if not TAB_NAME.fullmatch(self.name):
            raise ValueError(f"tab name {self.name!r}: use 1 to 32 lower-case letters, digits and dashes")
