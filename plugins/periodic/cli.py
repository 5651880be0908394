"""``kiq periodic``: the periodic jobs the workers run, with their last and next run."""

from __future__ import annotations

import argparse
import time
from typing import Any

from kiq.cli.output import inspected_config, inspection_options, print_json, print_table

from .entries import shown
from .store import statuses


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    parser = commands.add_parser(
        "periodic", parents=[inspection_options()], help="periodic (cron) jobs with their last and next run"
    )
    parser.set_defaults(run=run_periodic)


def run_periodic(args: argparse.Namespace) -> int:
    config = inspected_config(args)
    found = statuses(config.redis, time.time())
    if args.json:
        return print_json([status.as_dict() for status in found])
    if not found:
        print("no periodic jobs: no live worker on this Redis runs any")
        return 0
    rows = []
    for status in found:
        job = status.job
        tz = "UTC" if args.utc else job.tz  # times in the job's own zone, as its cron expression reads them
        last = "never" if status.last_run is None else shown(status.last_run, tz)
        rows.append([job.name, job.cron, job.job, job.queue or "(the job's)", last, shown(status.next_run, tz)])
    print_table(["NAME", "CRON", "CLASS", "QUEUE", "LAST RUN", "NEXT RUN"], rows)
    return 0
