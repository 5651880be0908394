"""A plugin tab's ``Graph`` (``kiq.tabs``): refused when malformed (an edge to no node, an id twice, a cycle, an
unknown tone), laid out in columns along its edges (a chain, a fan-out/fan-in, a 5,000-step chain), and drawn by the
dashboard as inline SVG: every node with its label and state escaped, its tone as a class, its link inside the tab
under the mount point, an edge per pair; too big a graph is said, not drawn. A ``DashboardLink`` leads to one of the
dashboard's own pages under its mount point."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

import kiq
from kiq.contrib.web.graph import NODE_WIDTH, layout
from kiq.tabs import GRAPH_MAX_NODES, DashboardLink, Facts, Graph, GraphNode, Link, Tab, TabView

from .http_support import ESCAPED_SCRIPT, private_config
from .test_tabs import SCRIPT, Plugin, mounted, page_of


@pytest.fixture
def e2e_config(one_redis_url: str) -> Iterator[kiq.Config]:
    yield from private_config(one_redis_url)


def chord(members: int) -> Graph:
    """start → members → body, as a workflow's chord inside a chain."""
    nodes = [GraphNode("start", "Start", "succeeded", "good")]
    nodes += [GraphNode(f"m{n}", f"Member {n}", "enqueued", "active") for n in range(members)]
    nodes.append(GraphNode("body", "Body", "waiting"))
    edges = [("start", f"m{n}") for n in range(members)] + [(f"m{n}", "body") for n in range(members)]
    return Graph(nodes, edges)


@pytest.mark.parametrize(
    ("nodes", "edges", "message"),
    [
        (["a"], [("a", "b")], "graph edge ('a', 'b') names no node 'b'"),
        (["a", "a"], [], "graph node id 'a' is used twice"),
        (["a", "b", "c"], [("a", "b"), ("b", "c"), ("c", "b")], "graph has a cycle through node"),
        (["a"], [("a", "a")], "graph has a cycle through node 'a'"),
    ],
)
def test_a_malformed_graph_is_refused_naming_the_node(
    nodes: list[str], edges: list[tuple[str, str]], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Graph([GraphNode(node, node) for node in nodes], edges)


def test_an_unknown_tone_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="tone 'green' is not one of neutral, active, good, bad, muted"):
        GraphNode("a", "A", tone="green")


def test_nodes_are_laid_out_in_columns_along_the_edges() -> None:
    assert chord(3).columns() == {"start": 0, "m0": 1, "m1": 1, "m2": 1, "body": 2}
    # a node comes right of the furthest node it follows, not the nearest
    skip = Graph([GraphNode(n, n) for n in "abc"], [("a", "b"), ("b", "c"), ("a", "c")])
    assert skip.columns() == {"a": 0, "b": 1, "c": 2}
    places = layout(chord(3))
    assert [places[f"m{n}"][1] for n in range(3)] == sorted(places[f"m{n}"][1] for n in range(3))  # in order
    assert places["start"][1] == places["m1"][1] == places["body"][1]  # the short columns centred
    assert places["body"][0] > places["m0"][0] + NODE_WIDTH > places["start"][0] + NODE_WIDTH
    long = Graph([GraphNode(str(n), str(n)) for n in range(5000)], [(str(n), str(n + 1)) for n in range(4999)])
    assert long.columns()["4999"] == 4999  # no recursion limit on a long chain


def showing(graph: Graph) -> Tab:
    return Tab("flows", "Flows", lambda request: TabView("Flows", [graph]))


def test_the_dashboard_draws_the_graph_as_svg_with_everything_escaped(e2e_config: kiq.Config) -> None:
    graph = Graph(
        [
            GraphNode("0", "<b>Fetch</b> & go", "succeeded", "good", Link("step 0", "wf/1/0", {"q": SCRIPT})),
            GraphNode("1", "Store", f"failed {SCRIPT}", "bad"),
            GraphNode("2", "A label longer than a node is wide", "skipped", "muted"),
        ],
        [("0", "1"), ("1", "2")],
        caption=f"Steps {SCRIPT}",
    )
    e2e_config.add_plugin(Plugin(showing(graph)))
    with mounted(e2e_config) as browser:
        answer = browser.get("/kiq/tabs/flows")
        page = page_of(answer)
        assert ESCAPED_SCRIPT in answer.text and "&lt;b&gt;Fetch&lt;/b&gt; &amp; go" in answer.text
        [svg] = [attributes for tag, attributes in page.tags if tag == "svg"]
        assert svg["class"] == "dag" and svg["aria-label"] == f"Steps {SCRIPT}"
        groups = [attributes for tag, attributes in page.tags if tag == "g" and attributes.get("data-node")]
        assert [(g["data-node"], g["class"]) for g in groups] == [
            ("0", "node tone-good"), ("1", "node tone-bad"), ("2", "node tone-muted")
        ]  # fmt: skip
        assert page.texts["text"] == [
            "<b>Fetch</b> & go", "succeeded", "Store", f"failed {SCRIPT}", "A label longer than…", "skipped"
        ]  # fmt: skip
        assert page.texts["title"][1:] == [  # [0]: the page's own
            "<b>Fetch</b> & go: succeeded", f"Store: failed {SCRIPT}", "A label longer than a node is wide: skipped"
        ]  # fmt: skip
        assert page.texts["figcaption"] == [f"Steps {SCRIPT}"]
        assert "/kiq/tabs/flows/wf/1/0?q=%3Cscript%3Ealert%281%29%3C%2Fscript%3E" in page.links()
        assert len([tag for tag, _ in page.tags if tag == "path"]) == 2
        assert all(url.startswith("/kiq/") for url in page.urls()), page.urls()


def test_too_big_a_graph_is_said_not_drawn(e2e_config: kiq.Config) -> None:
    e2e_config.add_plugin(Plugin(showing(chord(GRAPH_MAX_NODES))))
    with mounted(e2e_config) as browser:
        page = page_of(browser.get("/kiq/tabs/flows"))
        assert f"{GRAPH_MAX_NODES + 2} nodes: too many to draw (up to {GRAPH_MAX_NODES} are)." in page.texts["p"]
        assert not [tag for tag, _ in page.tags if tag == "svg"]


def test_an_empty_graph_says_so(e2e_config: kiq.Config) -> None:
    e2e_config.add_plugin(Plugin(showing(Graph([], []))))
    with mounted(e2e_config) as browser:
        assert "Nothing to draw." in page_of(browser.get("/kiq/tabs/flows")).texts["p"]


def test_a_dashboard_link_leads_to_the_dashboard_s_own_page_under_the_mount_point(e2e_config: kiq.Config) -> None:
    facts = Facts(
        [("Dead", DashboardLink("find it", "dead", {"q": SCRIPT})), ("Queue", DashboardLink("q", "queues/a b"))]
    )
    e2e_config.add_plugin(Plugin(Tab("flows", "Flows", lambda request: TabView("Flows", [facts]))))
    with mounted(e2e_config) as browser:
        page = page_of(browser.get("/kiq/tabs/flows"))
        assert page.texts["dd"] == ["find it", "q"]
        assert "/kiq/dead?q=%3Cscript%3Ealert%281%29%3C%2Fscript%3E" in page.links()
        assert "/kiq/queues/a%20b" in page.links()


def test_a_wide_graph_s_sizes_are_plain_numbers(e2e_config: kiq.Config) -> None:
    """SVG lengths take no thousands separator (Chromium refuses ``width="1,304"`` and draws nothing)."""
    steps = Graph([GraphNode(str(n), f"step {n}") for n in range(6)], [(str(n), str(n + 1)) for n in range(5)])
    e2e_config.add_plugin(Plugin(showing(steps)))
    with mounted(e2e_config) as browser:
        tags = page_of(browser.get("/kiq/tabs/flows")).tags
        [svg] = [attributes for tag, attributes in tags if tag == "svg"]
        assert svg["width"] == "1304" and svg["viewbox"] == "0 0 1304 56"  # (the parser lower-cases names)
        rects = [attributes for tag, attributes in tags if tag == "rect"]
        assert [rect["x"] for rect in rects] == ["8", "232", "456", "680", "904", "1128"]
