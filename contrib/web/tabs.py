"""The plugins' tabs (``kiq_web_tabs``): asked of the config's plugins once, rendered from their ``TabView``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kiq.tabs import (
    Cell,
    Code,
    DashboardLink,
    Document,
    Facts,
    Graph,
    Heading,
    Link,
    Pager,
    Search,
    Tab,
    Table,
    TabRequest,
    TabView,
    Text,
    When,
)

from .graph import graph_svg
from .html import Markup, el, escape, facts, link, pager, table, when
from .view import NotFound, Page, View

if TYPE_CHECKING:
    import kiq

log = logging.getLogger("kiq.web")


def plugin_tabs(config: kiq.Config) -> dict[str, Tab]:
    """Every tab the config's plugins contribute, by name, in the order the plugins were added; a name taken twice
    keeps the first plugin's, with a warning."""
    tabs: dict[str, Tab] = {}
    # pluggy calls the implementations last registered first: reversed, the plugins' own order
    for contributed in reversed(config.plugins.notify("kiq_web_tabs", config=config)):
        for tab in contributed or ():
            if not isinstance(tab, Tab):
                log.error("a kiq_web_tabs implementation returned %r, not a kiq.tabs.Tab; left out", tab)
            elif tab.name in tabs:
                log.warning("two plugins add a dashboard tab named %r; the second is left out", tab.name)
            else:
                tabs[tab.name] = tab
    return tabs


def tab_page(view: View, tab: Tab, path: str) -> Page | Document:
    """The tab's page in the dashboard's layout, or the ``Document`` it serves as it is."""
    request = TabRequest(path, view.query, view.config)
    try:
        shown = tab.render(request)
    except LookupError as exc:
        raise NotFound(str(exc) or "not found") from exc
    if isinstance(shown, Document):
        return shown
    if not isinstance(shown, TabView):
        raise TypeError(
            f"the {tab.name!r} tab's render returned {type(shown).__name__}, not a kiq.tabs.TabView or Document"
        )
    base = f"tabs/{tab.name}"
    blocks = [_block(view, base, path, block) for block in shown.blocks]
    return Page(shown.title, Markup("".join(blocks)), section=base)


def _block(view: View, base: str, path: str, block: object) -> Markup:
    match block:
        case Heading(text):
            return el("h2", text)
        case Text(text):
            return el("p", text)
        case Code(text):
            return el("pre", text)
        case Facts(items):
            return facts((label, _cell(view, base, value)) for label, value in items)
        case Table(columns, rows, empty):
            return table(columns, ([_cell(view, base, cell) for cell in row] for row in rows), empty)
        case Pager(page, more):
            return pager(view.url(f"{base}/{path}".rstrip("/")), view.query, page, more)
        case Search(name, placeholder):
            kept = [el("input", type="hidden", name=key, value=value) for key, value in view.query.items()
                    if key not in (name, "page")]  # fmt: skip
            box = el("input", type="search", name=name, value=view.query.get(name, ""), placeholder=placeholder,
                     aria_label=placeholder or "search")  # fmt: skip
            action = view.url(f"{base}/{path}".rstrip("/"))
            return el("form", kept, box, el("button", "Search", type="submit"), method="get", action=action,
                      class_="filter")  # fmt: skip
        case Graph():
            return graph_svg(block, lambda node: _url(view, base, node.link) if node.link else None)
    raise TypeError(f"a tab's view holds {type(block).__name__}, not one of kiq.tabs' blocks")


def _cell(view: View, base: str, cell: Cell) -> Markup:
    if isinstance(cell, Link):
        return link(cell.text, _url(view, base, cell))
    if isinstance(cell, DashboardLink):
        return link(cell.text, view.url(cell.page.lstrip("/"), dict(cell.query)))
    if isinstance(cell, When):
        return when(cell.epoch)
    return escape(cell)


def _url(view: View, base: str, target: Link) -> str:
    return view.url(f"{base}/{target.path.lstrip('/')}".rstrip("/"), dict(target.query))
