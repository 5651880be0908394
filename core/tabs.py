"""What a plugin adds to the web dashboard (``kiq.contrib.web``): tabs, contributed with the ``kiq_web_tabs`` hook.

A tab answers a request with a ``TabView``: data, not HTML. The dashboard renders it with its own layout and
escapes every string, so a plugin cannot write markup (or a script) into the page by mistake, and a tab looks like
the built-in pages::

    class MyPlugin:
        @kiq.hookimpl
        def kiq_web_tabs(self, config):
            return [Tab("locks", "Locks", lambda request: TabView("Locks", [Table(["Key", "TTL"], rows(config))]))]

The tab is served at ``<dashboard>/tabs/<name>/<path>``; ``TabRequest.path`` is the part after the name, and
``Link("text", "sub/path", {"page": "2"})`` links inside the tab, ``DashboardLink("text", "dead", {"q": jid})`` to
one of the dashboard's own pages. A render that raises ``LookupError`` answers 404; any other exception is logged
and shown as an error in that tab alone.

``Graph(nodes, edges)`` draws a directed acyclic graph (a workflow's steps, a pipeline's stages) as a picture: the
dashboard lays it out in columns, left to right along the edges, and renders it as inline SVG with its own escaping.
Each ``GraphNode`` has an ``id`` (what the edges name), a ``label``, an optional ``state`` word shown under it, a
``tone`` that colours it (one of ``TONES``) and an optional ``link`` (a ``Link`` inside the tab)::

    Graph([GraphNode("a", "Fetch", "succeeded", "good", Link("a", "step/a")), GraphNode("b", "Store", "waiting")],
          [("a", "b")])

Bad graphs are refused when built (``ValueError`` naming the node): an edge to an unknown id, an id taken twice, a
cycle. A graph of more than ``GRAPH_MAX_NODES`` nodes is not drawn (the page says so): show a part of it instead.

A render may answer with a ``Document`` instead of a ``TabView``: a whole page served as it is, outside the
dashboard's layout (an interactive viewer a library renders as one HTML file, e.g. a profile's flame graph), or a
file to download. HTML is served sandboxed: its inline scripts run in an origin of their own (no cookie, no access to
the dashboard's pages) and it may load nothing from the network (inline script and style, ``data:`` images and
fonts only), so a document that needs a CDN shows without it.
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
class DashboardLink:
    """A link to one of the dashboard's own pages, under its mount point: ``page`` is its path there ("dead",
    "retries", "queues/default", "busy"), ``query`` its parameters (``{"q": jid}`` searches a set's page)."""

    text: str
    page: str
    query: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class When:
    """A moment (epoch seconds), shown in the reader's time zone with that zone's name."""

    epoch: float | None


Cell = str | int | float | None | Link | DashboardLink | When


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


TONES = ("neutral", "active", "good", "bad", "muted")  # a node's colour: idle, in progress, done, failed, not run
GRAPH_MAX_NODES = 300  # drawn up to this many nodes; beyond, unreadable in a page (and slow to lay out)


@dataclass(frozen=True)
class GraphNode:
    """One node of a ``Graph``: ``id`` is what edges name; ``label`` and ``state`` are shown; ``tone`` (one of
    ``TONES``) colours it; ``link`` makes it lead to a page of the tab."""

    id: str
    label: str
    state: str = ""
    tone: str = "neutral"
    link: Link | None = None

    def __post_init__(self) -> None:
        if self.tone not in TONES:
            raise ValueError(f"graph node {self.id!r}: tone {self.tone!r} is not one of {', '.join(TONES)}")


@dataclass(frozen=True)
class Graph:
    """A directed acyclic graph drawn as a picture: ``edges`` are ``(from id, to id)`` pairs; nodes are laid out
    in columns, each node right of every node it comes after; ``caption`` is said above it."""

    nodes: Sequence[GraphNode]
    edges: Sequence[tuple[str, str]]
    caption: str = ""

    def __post_init__(self) -> None:
        ids: set[str] = set()
        for node in self.nodes:
            if node.id in ids:
                raise ValueError(f"graph node id {node.id!r} is used twice: give every node its own id")
            ids.add(node.id)
        for source, target in self.edges:
            unknown = [end for end in (source, target) if end not in ids]
            if unknown:
                raise ValueError(f"graph edge ({source!r}, {target!r}) names no node {unknown[0]!r}: add the node")
        if len(self.nodes) <= GRAPH_MAX_NODES:
            self.columns()  # raises on a cycle

    def columns(self) -> dict[str, int]:
        """Each node's column: 0 for a node after none, else one more than the furthest node it comes after."""
        before: dict[str, list[str]] = {node.id: [] for node in self.nodes}
        for source, target in self.edges:
            before[target].append(source)
        column: dict[str, int] = {}
        for start in before:
            stack, entered = [start], set()  # iterative depth-first: long chains must not hit the recursion limit
            while stack:
                node = stack[-1]
                if node in column:
                    stack.pop()
                    continue
                waiting = [prior for prior in before[node] if prior not in column]
                if not waiting:
                    column[node] = 1 + max((column[prior] for prior in before[node]), default=-1)
                    stack.pop()
                    continue
                if node in entered:
                    raise ValueError(f"graph has a cycle through node {node!r}: a Graph draws acyclic graphs only")
                entered.add(node)
                stack.extend(waiting)
        return column


Block = Heading | Text | Code | Facts | Table | Pager | Search | Graph


@dataclass(frozen=True)
class TabView:
    title: str
    blocks: Sequence[Block]


@dataclass(frozen=True)
class Document:
    """A whole answer a tab serves as it is: ``body`` of ``content_type`` (``text/html`` is shown, sandboxed, see
    the module's doc); with a ``filename`` the browser saves it under that name; ``content_encoding`` names how
    ``body`` is already compressed (``"gzip"``), for a client that reads it as the uncompressed type."""

    body: bytes
    content_type: str
    filename: str | None = None
    content_encoding: str | None = None


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
    the navigation, ``render`` answers each request with a view or a ``Document`` (called in a worker thread: it may
    block on a database)."""

    name: str
    title: str
    render: Callable[[TabRequest], TabView | Document]

    def __post_init__(self) -> None:
        if not TAB_NAME.fullmatch(self.name):
            raise ValueError(f"tab name {self.name!r}: use 1 to 32 lower-case letters, digits and dashes")
