"""Plugins' dashboard tabs (``kiq_web_tabs``, ``kiq.tabs``): a tab shows in the navigation and its page renders
every kind of block, escaped, with links that stay in the tab under the dashboard's mount point; a render that
raises LookupError answers 404, any other failure answers 500 in that tab alone; a plugin whose hook fails is left
out (logged), a tab name taken twice keeps the first plugin's (with a warning), and a bad name is refused."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from werkzeug.exceptions import NotFound
from werkzeug.middleware.dispatcher import DispatcherMiddleware

import kiq
from kiq.contrib.web import wsgi_app
from kiq.tabs import Code, Facts, Heading, Link, Pager, Tab, Table, TabRequest, TabView, Text, When

from .http_support import ESCAPED_SCRIPT, Document, parse, private_config

Dashboard = Callable[..., str]  # the conftest's fixture
SCRIPT = "<script>alert(1)</script>"
MOMENT = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


@pytest.fixture
def e2e_config(one_redis_url: str) -> Iterator[kiq.Config]:
    """The dashboard's config, on a database of these tests' own (see http_support)."""
    yield from private_config(one_redis_url)


class Plugin:
    """A plugin that adds ``tabs`` (or whose hook raises ``fails``, or returns ``tabs`` as they are)."""

    def __init__(self, *tabs: Any, fails: Exception | None = None) -> None:
        self.tabs = list(tabs)
        self.fails = fails

    @kiq.hookimpl
    def kiq_web_tabs(self, config: kiq.Config) -> list[Any]:
        if self.fails is not None:
            raise self.fails
        return self.tabs


def showcase(request: TabRequest) -> TabView:
    """Every kind of block, each with markup in its strings; ``missing/...`` is not found."""
    if request.path.startswith("missing"):
        raise LookupError(f"no lock {request.path!r}")
    return TabView(
        f"Locks {SCRIPT}",
        [
            Heading(f"Heading {SCRIPT}"),
            Text(f"at {request.path!r} q={request.query.get('q')!r} page {request.page}"),
            Code(f"Code {SCRIPT}\nline 2"),
            Facts([(f"Label {SCRIPT}", f"Value {SCRIPT}"), ("When", When(MOMENT)), ("Count", 1234567),
                   ("Link", Link(f"Open {SCRIPT}", "item/7", {"q": SCRIPT})), ("Nothing", None)]),
            Table([f"Column {SCRIPT}", "When", "Link"],
                  [[f"Cell {SCRIPT}", When(MOMENT), Link("seven", "item/7")], [2.5, When(None), Link("home", "")],
                   ["odd", None, Link("odd", "/a b?c#d%e")]]),
            Table(["Nothing"], [], empty=f"Empty {SCRIPT}"),
            Pager(request.page, request.page < 3),
        ],
    )  # fmt: skip


def mounted(config: kiq.Config) -> httpx.Client:
    """The plain WSGI app mounted at /kiq of a WSGI host (werkzeug's dispatcher), through httpx."""
    host = DispatcherMiddleware(NotFound(), {"/kiq": wsgi_app(config)})
    return httpx.Client(transport=httpx.WSGITransport(app=host), base_url="http://host.test")


def page_of(answer: httpx.Response, status: int = 200) -> Document:
    assert answer.status_code == status, (answer.url, answer.status_code, answer.text[-400:])
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    assert "<script>alert" not in answer.text
    return parse(answer.text)


def test_a_tab_shows_in_the_navigation_and_renders_every_block_escaped(e2e_config: kiq.Config) -> None:
    e2e_config.add_plugin(Plugin(Tab("locks", f"Locks {SCRIPT}", showcase)))
    with mounted(e2e_config) as browser:
        home = page_of(browser.get("/kiq/"))
        nav = [(attributes.get("href"), attributes.get("aria-current")) for tag, attributes in home.tags if tag == "a"]
        assert ("/kiq/tabs/locks", None) in nav
        assert f"Locks {SCRIPT}" in home.texts["nav"][0]

        answer = browser.get("/kiq/tabs/locks")
        page = page_of(answer)
        assert ESCAPED_SCRIPT in answer.text
        assert ("a", {"href": "/kiq/tabs/locks", "aria-current": "page"}) in page.tags  # its navigation entry
        assert page.texts["h1"] == [f"Locks {SCRIPT}"] and page.texts["h2"] == [f"Heading {SCRIPT}"]
        assert "at '' q=None page 1" in page.texts["p"]
        assert f"Empty {SCRIPT}" in page.texts["p"]
        assert page.texts["pre"] == [f"Code {SCRIPT}\nline 2"]
        assert page.texts["dt"] == [f"Label {SCRIPT}", "When", "Count", "Link", "Nothing"]
        assert page.texts["dd"] == [f"Value {SCRIPT}", "2023-11-14 22:13:20 UTC", "1,234,567", f"Open {SCRIPT}", ""]
        assert ("time", {"datetime": "2023-11-14T22:13:20+00:00", "data-epoch": repr(MOMENT)}) in page.tags
        [table] = [rows for rows in page.tables.values() if rows]
        assert [[cell.text for cell in row] for row in table] == [
            [f"Cell {SCRIPT}", "2023-11-14 22:13:20 UTC", "seven"], ["2.5", "–", "home"], ["odd", "", "odd"]
        ]  # fmt: skip
        assert page.texts["th"] == [f"Column {SCRIPT}", "When", "Link"]  # the empty table says so instead
        links = page.links()
        assert "/kiq/tabs/locks/item/7?q=%3Cscript%3Ealert%281%29%3C%2Fscript%3E" in links  # Facts' Link
        assert [row[2].hrefs for row in table] == [["/kiq/tabs/locks/item/7"], ["/kiq/tabs/locks"],
                                                    ["/kiq/tabs/locks/a%20b%3Fc%23d%25e"]]  # fmt: skip
        assert "/kiq/tabs/locks?page=2" in links and not [link for link in links if "page=0" in link]
        assert all(url.startswith("/kiq/") for url in page.urls()), page.urls()

        # the links lead into the tab, with their path and query
        opened = page_of(browser.get("/kiq/tabs/locks/item/7", params={"q": SCRIPT}))
        assert f"at 'item/7' q={SCRIPT!r} page 1" in opened.texts["p"]
        odd = page_of(browser.get("/kiq/tabs/locks/a%20b%3Fc%23d%25e"))
        assert "at 'a b?c#d%e' q=None page 1" in odd.texts["p"]
        second = page_of(browser.get("/kiq/tabs/locks?page=2"))
        assert {"/kiq/tabs/locks?page=1", "/kiq/tabs/locks?page=3"} <= set(second.links())
        last = page_of(browser.get("/kiq/tabs/locks/item/7?page=3&q=x"))
        pager = [link for link in last.links() if "page=" in link]
        assert pager == ["/kiq/tabs/locks/item/7?page=2&q=x"]  # no next page; the query kept


def test_a_render_that_raises_lookup_error_answers_404(dashboard: Dashboard, e2e_config: kiq.Config) -> None:
    e2e_config.add_plugin(Plugin(Tab("locks", "Locks", showcase)))
    with httpx.Client(base_url=dashboard()) as browser:
        page = page_of(browser.get("/tabs/locks/missing/3"), 404)
        assert page.texts["h1"] == ["Not found"] and "no lock 'missing/3'" in page.texts["p"]
        assert browser.get("/tabs/nosuchtab").status_code == 404
        assert browser.get("/tabs/locks").status_code == 200


def failing(request: TabRequest) -> TabView:
    raise RuntimeError(f"boom {SCRIPT}")


def not_a_view(request: TabRequest) -> TabView:
    return "<b>html</b>"  # type: ignore[return-value]  # a plugin's mistake


def foreign_block(request: TabRequest) -> TabView:
    return TabView("Foreign", ["<b>a string is not a block</b>"])  # type: ignore[list-item]


@pytest.mark.parametrize("render", [failing, not_a_view, foreign_block])
def test_a_render_that_fails_answers_500_in_its_tab_alone(
    dashboard: Dashboard, e2e_config: kiq.Config, render: Callable[[TabRequest], TabView],
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    e2e_config.add_plugin(Plugin(Tab("broken", "Broken", render), Tab("locks", "Locks", showcase)))
    with caplog.at_level(logging.ERROR, "kiq.web"), httpx.Client(base_url=dashboard()) as browser:
        answer = browser.get("/tabs/broken")
        page = page_of(answer, 500)
        assert ("div", {"class": "banner", "role": "alert"}) in page.tags
        assert "<b>" not in answer.text and "This page failed" in page.text
        assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
        assert "/tabs/broken" in caplog.text
        for path in ("/", "/queues", "/dead", "/tabs/locks", "/tabs/locks/item/1"):
            assert browser.get(path).status_code == 200, path
        assert browser.get("/tabs/broken").status_code == 500  # and again: nothing was cached


def test_a_plugin_whose_hook_fails_is_left_out_and_logged(
    dashboard: Dashboard, e2e_config: kiq.Config, caplog: pytest.LogCaptureFixture
) -> None:
    e2e_config.add_plugin(Plugin(fails=RuntimeError("no database")))
    e2e_config.add_plugin(Plugin("not a tab", Tab("good", "Good", showcase)))
    with caplog.at_level(logging.WARNING):
        url = dashboard()
    assert "kiq_web_tabs" in caplog.text and "no database" in caplog.text
    assert "'not a tab', not a kiq.tabs.Tab" in caplog.text
    with httpx.Client(base_url=url) as browser:
        home = page_of(browser.get("/"))
        assert [link for link in home.links() if link.startswith("/tabs/")] == ["/tabs/good"]
        assert browser.get("/tabs/good").status_code == 200


def test_a_tab_name_taken_twice_keeps_the_first_plugins(
    dashboard: Dashboard, e2e_config: kiq.Config, caplog: pytest.LogCaptureFixture
) -> None:
    def titled(title: str) -> Callable[[TabRequest], TabView]:
        return lambda request: TabView(title, [Text(title)])

    e2e_config.add_plugin(Plugin(Tab("dup", "First", titled("First page")), Tab("one", "One", titled("One"))))
    e2e_config.add_plugin(Plugin(Tab("dup", "Second", titled("Second page")), Tab("two", "Two", titled("Two"))))
    with caplog.at_level(logging.WARNING, "kiq.web"):
        url = dashboard()
    assert "two plugins add a dashboard tab named 'dup'" in caplog.text
    with httpx.Client(base_url=url) as browser:
        home = page_of(browser.get("/"))
        tabs = [link for link in home.links() if link.startswith("/tabs/")]
        assert tabs == ["/tabs/dup", "/tabs/one", "/tabs/two"]  # the plugins' order
        assert home.texts["nav"][0].endswith("MetricsFirstOneTwo")  # the second "dup" left out
        assert page_of(browser.get("/tabs/dup")).texts["h1"] == ["First page"]
        assert browser.get("/tabs/two").status_code == 200


@pytest.mark.parametrize("name", ["", "Locks", "1abc", "a b", "a/b", "tabs/x", "-x", "x_y", "ünï", "a" * 33, "a\n"])
def test_a_tab_with_a_bad_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="tab name"):
        Tab(name, "Title", showcase)


@pytest.mark.parametrize("name", ["a", "a-1", "locks", "x" * 32])
def test_a_tab_with_a_good_name_is_made(name: str) -> None:
    assert Tab(name, "Title", showcase).name == name
