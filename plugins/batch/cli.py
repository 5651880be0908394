"""``kiq batches``: the newest batches with their counts, or one batch in full (``kiq batches BID``)."""

from __future__ import annotations

import argparse
from typing import Any

from kiq.cli.output import inspected_config, inspection_options, print_json, print_table, short, when

from .status import BatchStatus, batches, status


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    parser = commands.add_parser(
        "batches", parents=[inspection_options()], help="batches of jobs: the newest ones, or one in full"
    )
    parser.add_argument("bid", nargs="?", help="show this batch: its counts, times, children and callbacks")
    parser.add_argument("--limit", type=int, default=50, help="how many of the newest batches to list (default 50)")
    parser.set_defaults(run=run_batches)


def state(batch: BatchStatus) -> str:
    if batch.success:
        return "success"
    if batch.complete:
        return "complete"
    return "open" if batch.open_blocks else "running"


def run_batches(args: argparse.Namespace) -> int:
    config = inspected_config(args)
    if args.bid is None:
        found = batches(config, args.limit)
        if args.json:
            return print_json([shown(batch) for batch in found])
        listed = [
            [b.bid, state(b), b.total, b.pending, b.failures, b.dead, when(b.created_at, args.utc), printable(b)]
            for b in found
        ]
        print_table(["BID", "STATE", "TOTAL", "PENDING", "FAILURES", "DEAD", "CREATED", "DESCRIPTION"], listed)
        return 0
    try:
        batch = status(args.bid, config)
    except ValueError as exc:
        print(f"kiq batches: {exc}")
        return 2
    if batch is None:
        print(f"no batch {args.bid}: never created, or expired")
        return 1
    if args.json:
        return print_json(shown(batch))
    times = {"created": batch.created_at, "complete": batch.complete_at, "success": batch.success_at}
    rows: list[list[Any]] = [["bid", batch.bid], ["state", state(batch)], ["description", printable(batch, 200)]]
    rows += [[name, getattr(batch, name)] for name in ("total", "pending", "failures", "dead", "open_blocks")]
    rows += [[name, when(at, args.utc)] for name, at in times.items() if at is not None]
    if batch.death_at is not None:
        rows.append(["first death", when(batch.death_at, args.utc)])
    rows.append(["parent", batch.parent_bid or "-"])
    rows += [[f"child {child}", child_state] for child, child_state in sorted(batch.children.items())]
    rows += [[f"on {event}", name] for event, name in batch.callbacks.items()]
    print_table(["FIELD", "VALUE"], rows)
    return 0


def printable(batch: BatchStatus, limit: int = 60) -> str:
    """The description on one line, cut short."""
    return short(escaped(batch.description), limit)


def shown(batch: BatchStatus) -> dict[str, Any]:
    return {**batch.as_dict(), "description": escaped(batch.description)}


def escaped(text: str) -> str:
    """Text that can be printed: what was not UTF-8 (lone surrogates) as ``\\udcXX`` escapes, not a crash."""
    return text.encode("utf-8", "backslashreplace").decode()
