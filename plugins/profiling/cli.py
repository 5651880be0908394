"""``kiq profiles``: the profiles kept on the Redis, newest first (``--json`` for scripts)."""

from __future__ import annotations

import argparse
from typing import Any

from kiq.cli.output import inspected_config, inspection_options, print_json, print_table, when

from .store import records

DEFAULT_LIMIT = 100


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    parser = commands.add_parser(
        "profiles", parents=[inspection_options()], help="job profiles kept (a day) for jobs pushed with a token"
    )
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help=f"newest N only (default {DEFAULT_LIMIT})")
    parser.set_defaults(run=run_profiles)


def run_profiles(args: argparse.Namespace) -> int:
    config = inspected_config(args)
    found = records(config.redis, limit=max(1, args.limit))
    if args.json:
        return print_json([profile.as_dict() for profile in found])
    if not found:
        print('no profiles: push a job with a profile token (MyJob.set(profile="token")) to make one')
        return 0
    rows = [
        [when(profile.started_at, args.utc), profile.type, profile.jid, profile.token, f"{profile.elapsed:.3f}s",
         profile.size, f"failed: {profile.error}" if profile.error else "done", "cut" if profile.cut else ""]
        for profile in found
    ]  # fmt: skip
    print_table(["STARTED", "CLASS", "JID", "TOKEN", "ELAPSED", "BYTES", "OUTCOME", ""], rows)
    return 0
