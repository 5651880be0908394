"""The Dashboard page: the counters, a live graph of processed and failed jobs (the page's script polls
``stats.json``), the daily history, and what Redis says of itself."""

from __future__ import annotations

import datetime
from typing import Any

from kiq.api import Stats

from .html import Markup, Node, el, link, number, table
from .view import Page, View

HISTORY_DAYS = (7, 30, 90)
POLL_SECONDS = (2, 5, 10, 20)


def live_stats(view: View) -> dict[str, Any]:
    """What the live graph polls: totals and sizes, read in two pipelined round trips."""
    stats = Stats(view.config)
    return {**stats.as_dict(), "time": datetime.datetime.now(datetime.UTC).timestamp()}


def overview(view: View) -> Page:
    stats = Stats(view.config)
    counters = [
        ("Processed", stats.processed, ""),
        ("Failed", stats.failed, ""),
        ("Busy", stats.workers_size, "busy"),
        ("Enqueued", stats.enqueued, "queues"),
        ("Retries", stats.retry_size, "retries"),
        ("Scheduled", stats.scheduled_size, "scheduled"),
        ("Dead", stats.dead_size, "dead"),
        ("Processes", stats.processes_size, "busy"),
    ]
    cards = el(
        "ul",
        [
            el(
                "li",
                link(el("b", count, id=f"stat-{label.lower()}"), view.url(path))
                if path
                else el("b", count, id=f"stat-{label.lower()}"),
                el("span", label),
            )
            for label, count, path in counters
        ],
        class_="cards",
    )
    poll = view.number_param("poll", 5, 60)
    intervals = el(
        "span",
        "Poll every ",
        [link(f"{s} s", view.url("", {"poll": s}), aria_current="true" if s == poll else None) for s in POLL_SECONDS],
        class_="choices",
    )
    live = el(
        "section",
        el("h2", "Live"),
        intervals,
        el("div", id="live-graph", class_="graph", data_source=view.url("stats.json"), data_poll=poll),
        el(
            "p",
            el("span", "processed", class_="key processed"),
            el("span", "failed", class_="key failed"),
            el("span", "", id="live-status", class_="muted"),
        ),
    )
    days = view.number_param("days", 30, 180)
    history = stats.history(days)
    choices = el(
        "span",
        [
            link(f"{d} days", view.url("", {"days": d}), aria_current="true" if d == days else None)
            for d in HISTORY_DAYS
        ],
        class_="choices",
    )
    past = el("section", el("h2", "History"), choices, history_graph(history), history_table(history))
    return Page("Dashboard", Markup(cards + live + past + redis_info(view)), section="")


def history_graph(history: dict[str, dict[str, int]]) -> Markup:
    """Daily processed (bars) and failed (a darker bar inside), oldest day on the left, as an SVG."""
    dates = sorted(history["processed"])
    highest = max([1, *history["processed"].values(), *history["failed"].values()])
    width, height, gap = 900, 160, 2
    step = width / max(1, len(dates))
    bars: list[Markup] = []
    for index, date in enumerate(dates):
        for name, value in (("processed", history["processed"][date]), ("failed", history["failed"][date])):
            tall = height * value / highest
            bars.append(el(
                "rect", el("title", f"{date}: {number(value)} {name}"), x=f"{index * step:.1f}",
                y=f"{height - tall:.1f}", width=f"{max(1.0, step - gap):.1f}", height=f"{tall:.1f}", class_=name,
            ))  # fmt: skip
    return el(
        "svg", bars, viewBox=f"0 0 {width} {height}", preserveAspectRatio="none", class_="history", role="img",
        aria_label="daily history",
    )  # fmt: skip


def history_table(history: dict[str, dict[str, int]]) -> Markup:
    rows: list[list[Node]] = [
        [date, history["processed"][date], history["failed"][date]] for date in history["processed"]
    ]
    return el("details", el("summary", "Daily counts"), table(["Date (UTC)", "Processed", "Failed"], rows, "No days."))


def redis_info(view: View) -> Markup:
    info = view.config.redis.info()
    url = view.config.redis_url or "embedded"
    items = [
        ("Version", info.get("redis_version")),
        ("Uptime", f"{number(int(info.get('uptime_in_days', 0)))} days"),
        ("Connections", info.get("connected_clients")),
        ("Used memory", info.get("used_memory_human")),
        ("Peak used memory", info.get("used_memory_peak_human")),
        ("Max memory", info.get("maxmemory_human") if info.get("maxmemory") else "no limit"),
        ("Eviction policy", info.get("maxmemory_policy")),
    ]
    return el(
        "section",
        el("h2", "Redis"),
        el("p", el("code", redact(url)), class_="muted"),
        el(
            "dl",
            [
                [el("dt", label), el("dd", value, id=f"redis-{label.lower().replace(' ', '-')}")]
                for label, value in items
            ],
            class_="facts",
        ),
    )


def redact(url: str) -> str:
    """A Redis URL without its password."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.partition(":")[0]
    return f"{scheme}://{user + ':' if user else ''}***@{host}"
