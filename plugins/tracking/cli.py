"""``kiq tracking init-db`` (create the tables, idempotent) and ``kiq tracking show TASK_ID``."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from kiq import Config

if TYPE_CHECKING:
    from .store import Store


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    """Register ``kiq tracking ...`` on the ``kiq`` parser."""
    tracking = commands.add_parser("tracking", help="task/event tracking database")
    sub = tracking.add_subparsers(dest="tracking_command", metavar="COMMAND", required=True)
    init = sub.add_parser("init-db", help="create the tracking tables if they are missing")
    show = sub.add_parser("show", help="print a task's status as JSON")
    show.add_argument("task_id")
    show.add_argument("--events", action="store_true", help="include every job's event")
    for parser in (init, show):
        parser.add_argument("-C", "--config", help="config file (default: kiq.toml or [tool.kiq] in pyproject.toml)")
        parser.add_argument("--database-url", help="SQLAlchemy URL (default: the tracking_database_url setting)")
    init.set_defaults(run=run_init_db)
    show.set_defaults(run=run_show)


def _store(args: argparse.Namespace) -> Store:
    # imported here, not at the top: ``kiq`` registers these commands at every start, tracking on or off
    from .store import Store

    if args.database_url:
        return Store(args.database_url)
    return Store(Config.load(args.config, plugins=["tracking"]).get("tracking_database_url"))


def run_init_db(args: argparse.Namespace) -> int:
    store = _store(args)
    store.init_schema()
    print(f"tracking tables ready in {store.engine.url.render_as_string(hide_password=True)}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    task = _store(args).task(args.task_id, with_events=args.events)
    if task is None:
        print(f"no task {args.task_id!r}")
        return 1
    print(json.dumps(task, indent=2))
    return 0
