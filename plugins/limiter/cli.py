"""``kiq limiters``: every limiter in use on the Redis, how much of its limit is taken, and how many jobs it sent
back to the schedule."""

from __future__ import annotations

import argparse
from typing import Any

from kiq.cli.output import inspected_config, inspection_options, print_json, print_table

from .state import limiter_states


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    parser = commands.add_parser(
        "limiters", parents=[inspection_options()], help="rate limiters in use: limit, what is taken, jobs rescheduled"
    )
    parser.set_defaults(run=run_limiters)


def run_limiters(args: argparse.Namespace) -> int:
    states = limiter_states(inspected_config(args))
    if args.json:
        return print_json([state.as_dict() for state in states])
    if not states:
        print("no limiter has been used on this Redis")
        return 0
    rows = [[s.kind, s.name, s.rate, s.in_use, s.overrated] for s in states]
    print_table(["KIND", "NAME", "LIMIT", "IN USE", "OVERRATED"], rows)
    return 0
