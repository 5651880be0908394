"""A plugin tab's ``Graph`` (``kiq.tabs``) as inline SVG: nodes in columns (``Graph.columns``, left to right along
the edges), ordered in each column by where the nodes they come after sit (one barycentre pass: fewer crossings),
edges as curves from a node's right side to the next one's left. Every string goes through ``html.el``, which
escapes it; colours come from the style sheet's ``tone-*`` classes (the page's CSP allows no inline style).
"""

from __future__ import annotations

from collections.abc import Callable

from kiq.tabs import GRAPH_MAX_NODES, Graph, GraphNode

from .html import Markup, el, number

NODE_WIDTH, NODE_HEIGHT = 168, 40
COLUMN_GAP, ROW_GAP, MARGIN = 56, 14, 8
LABEL_CHARACTERS = 20  # a longer label is cut (the node's tooltip has it whole)


def graph_svg(graph: Graph, url: Callable[[GraphNode], str | None]) -> Markup:
    """``graph`` drawn; ``url(node)`` is where the node leads (None: nowhere)."""
    if len(graph.nodes) > GRAPH_MAX_NODES:
        return el(
            "p",
            f"{number(len(graph.nodes))} nodes: too many to draw (up to {GRAPH_MAX_NODES} are).",
            class_="empty",
        )
    if not graph.nodes:
        return el("p", "Nothing to draw.", class_="empty")
    places = layout(graph)
    width = max(x for x, _ in places.values()) + NODE_WIDTH + MARGIN
    height = max(y for _, y in places.values()) + NODE_HEIGHT + MARGIN
    edges = [_edge(places[source], places[target]) for source, target in graph.edges]
    nodes = [_node(node, places[node.id], url(node)) for node in graph.nodes]
    picture = el(
        "svg",
        el("g", edges, class_="edges"),
        nodes,
        xmlns="http://www.w3.org/2000/svg",
        viewBox=f"0 0 {width} {height}",
        width=str(width),  # strings: escape() would write a number with a thousands separator
        height=str(height),
        class_="dag",
        role="group",
        aria_label=graph.caption or f"graph of {len(graph.nodes)} nodes",
    )
    caption = el("figcaption", graph.caption) if graph.caption else None
    return el("figure", caption, el("div", picture, class_="dag-scroll"), class_="dag")


def layout(graph: Graph) -> dict[str, tuple[int, int]]:
    """Each node's top-left corner."""
    column = graph.columns()
    before: dict[str, list[str]] = {node.id: [] for node in graph.nodes}
    for source, target in graph.edges:
        before[target].append(source)
    by_column: dict[int, list[str]] = {}
    for node in graph.nodes:  # the nodes' own order first: a group's members stay in order
        by_column.setdefault(column[node.id], []).append(node.id)
    tallest = max(len(ids) for ids in by_column.values())
    row: dict[str, float] = {}
    places: dict[str, tuple[int, int]] = {}
    for index in sorted(by_column):
        ids = by_column[index]
        # a node sits near the nodes it comes after (their mean row); ties keep the given order (sort is stable)
        ids.sort(key=lambda id_: sum(row[p] for p in before[id_]) / len(before[id_]) if before[id_] else 0.0)
        offset = (tallest - len(ids)) / 2  # a column shorter than the tallest is centred
        for position, id_ in enumerate(ids):
            row[id_] = position + offset
            x = MARGIN + index * (NODE_WIDTH + COLUMN_GAP)
            places[id_] = (x, round(MARGIN + row[id_] * (NODE_HEIGHT + ROW_GAP)))
    return places


def _edge(start: tuple[int, int], end: tuple[int, int]) -> Markup:
    x1, y1 = start[0] + NODE_WIDTH, start[1] + NODE_HEIGHT // 2
    x2, y2 = end[0], end[1] + NODE_HEIGHT // 2
    bend = (x2 - x1) / 2
    return el("path", d=f"M{x1},{y1} C{x1 + bend:g},{y1} {x2 - bend:g},{y2} {x2},{y2}")


def _node(node: GraphNode, place: tuple[int, int], target: str | None) -> Markup:
    x, y = place
    label = node.label if len(node.label) <= LABEL_CHARACTERS else node.label[: LABEL_CHARACTERS - 1] + "…"
    texts = [el("text", label, x=str(x + 10), y=str(y + (17 if node.state else 25)), class_="label")]
    if node.state:
        texts.append(el("text", node.state, x=str(x + 10), y=str(y + 32), class_="state"))
    tooltip = el("title", f"{node.label}: {node.state}" if node.state else node.label)
    box = el("rect", x=str(x), y=str(y), width=str(NODE_WIDTH), height=str(NODE_HEIGHT), rx="5")
    shape = el("g", tooltip, box, texts, class_=f"node tone-{node.tone}", data_node=node.id)
    return el("a", shape, href=target) if target else shape
