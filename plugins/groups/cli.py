"""``kiq groups [QUEUE]``: each queue's job groups with their waiting jobs, slots in use, limit and pause."""

from __future__ import annotations

import argparse
from typing import Any

from kiq.cli.output import inspected_config, inspection_options, print_json, print_table, short

from .listing import QueueGroups, all_groups, queue_groups


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    parser = commands.add_parser(
        "groups", parents=[inspection_options()], help="job groups: waiting, running, limit and pause per group"
    )
    parser.add_argument("queue", nargs="?", help="only this queue's groups")
    parser.add_argument("--limit", type=int, default=50, help="most groups listed per queue, most waiting first")
    parser.set_defaults(run=run_groups)


def run_groups(args: argparse.Namespace) -> int:
    config = inspected_config(args)
    found = [queue_groups(config, args.queue, args.limit)] if args.queue else all_groups(config, args.limit)
    if args.json:
        return print_json([shown(groups) for groups in found])
    rows = [
        [g.queue, short(g.name, 60), g.ready, g.running, "default" if g.limit is None else g.limit or "none",
         "yes" if g.paused else ""]
        for groups in found
        for g in groups.shown
    ]  # fmt: skip
    print_table(["QUEUE", "GROUP", "READY", "RUNNING", "LIMIT", "PAUSED"], rows)
    for groups in found:
        if groups.count > len(groups.shown):
            print(f"{groups.queue}: {len(groups.shown)} of {groups.count} groups shown ({groups.waiting} jobs waiting)")
    return 0


def shown(groups: QueueGroups) -> dict[str, Any]:
    return {
        "queue": groups.queue,
        "groups": groups.count,
        "active": groups.active,
        "waiting": groups.waiting,
        "running": groups.running,
        "shown": [g.as_dict() for g in groups.shown],
    }
