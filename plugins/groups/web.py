"""The groups plugin's dashboard tab, "Groups" (``kiq.contrib.web``; see ``kiq.tabs``): per queue with groups, its
count of groups and waiting jobs, and its busiest groups (waiting, running, limit, paused)."""

from __future__ import annotations

import kiq
from kiq.tabs import Cell, Facts, Heading, Tab, Table, TabRequest, TabView

from .listing import all_groups

SHOWN = 50  # groups per queue


def groups_tab(config: kiq.Config) -> Tab:
    return Tab("groups", "Groups", lambda request: render(config, request))


def render(config: kiq.Config, request: TabRequest) -> TabView:
    if request.path:
        raise LookupError(f"no such page: {request.path!r:.80}")
    blocks: list[Heading | Facts | Table] = []
    for groups in all_groups(config, SHOWN):
        blocks.append(Heading(f"Queue {groups.queue}"))
        blocks.append(
            Facts([("Groups", str(groups.count)), ("Waiting", str(groups.waiting)), ("Running", str(groups.running))])
        )
        rows: list[list[Cell]] = [
            [
                g.name,
                g.ready,
                g.running,
                "default" if g.limit is None else g.limit or "none",
                "paused" if g.paused else "",
            ]
            for g in groups.shown
        ]
        blocks.append(Table(["Group", "Waiting", "Running", "Limit", "State"], rows))
    if not blocks:
        blocks.append(Heading("No job groups"))
    return TabView("Groups", blocks)
