"""``kiq workflows``: the newest workflows with their states, or one workflow in full (``kiq workflows ID``)."""

from __future__ import annotations

import argparse
from typing import Any

from kiq.cli.output import inspected_config, inspection_options, print_json, print_table, short, when

from .status import WorkflowStatus, status, workflows


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    parser = commands.add_parser(
        "workflows", parents=[inspection_options()], help="workflows (chains, groups, chords): the newest, or one"
    )
    parser.add_argument("id", nargs="?", help="show this workflow: its state, result and every step")
    parser.add_argument("--limit", type=int, default=50, help="how many of the newest workflows to list (default 50)")
    parser.set_defaults(run=run_workflows)


def counts(found: WorkflowStatus) -> str:
    done = sum(step.state == "succeeded" for step in found.steps)
    return f"{done}/{len(found.steps)}"


def run_workflows(args: argparse.Namespace) -> int:
    config = inspected_config(args)
    if args.id is None:
        listed = [found for found in map(lambda i: status(i, config), workflows(args.limit, None, config).ids) if found]
        if args.json:
            return print_json([found.to_dict() for found in listed])
        rows = [[f.id, f.state, counts(f), when(f.created_at, args.utc)] for f in listed]
        print_table(["ID", "STATE", "STEPS DONE", "CREATED"], rows)
        return 0
    try:
        found = status(args.id, config)
    except ValueError as exc:
        print(f"kiq workflows: {exc}")
        return 2
    if found is None:
        print(f"no workflow {args.id}: never started, or expired (workflow_retention)")
        return 1
    if args.json:
        return print_json(found.to_dict())
    print_table(
        ["FIELD", "VALUE"],
        [["id", found.id], ["state", found.state], ["created", when(found.created_at, args.utc)]]
        + ([["finished", when(found.finished_at, args.utc)]] if found.finished_at is not None else [])
        + ([["error", short(str(found.error), 200)]] if found.error else [])
        + ([["result", short(repr(found.result), 200)]] if found.state == "succeeded" else []),
    )
    print()
    print_table(
        ["STEP", "CLASS", "QUEUE", "JID", "STATE", "AFTER", "RESULT / ERROR"],
        [
            [s.step, s.job_class, s.queue, s.jid or "-", s.state, ",".join(s.after) or "-",
             short(s.error if s.error else repr(s.result) if s.state == "succeeded" else "", 60)]
            for s in found.steps
        ],
    )  # fmt: skip
    return 0
