"""``kiq busy`` (the jobs running now, with iterable jobs' cursor, executions and runtime) and ``kiq cancel JID``
(cancel an iterable job, as ``kiq.cancel`` does)."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from ..api import Work, Workers, iteration_states, runtime_so_far
from ..config import Config
from ..errors import KiqError
from ..iteration import IterationState, cancel
from ..iteration.state import read
from .inspection import _guarded
from .output import duration, inspection_options, print_json, print_table, report, short, when

JID = re.compile(r"[0-9A-Za-z_-]{1,64}")  # kiq's and Sidekiq's 24 hex digits, and other producers' ids


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    common = inspection_options()
    busy = commands.add_parser(
        "busy",
        parents=[common],
        help="the jobs running now; iterable jobs with their cursor, executions and runtime",
        description="Every job running in a live process, oldest first. For an iterable job that has saved its "
        "state: RUN is its execution (1 on the first, +1 per interruption or retry), CURSOR where it is, RUNTIME "
        "its time over all executions so far.",
    )
    busy.set_defaults(run=_guarded(run_busy))
    cancel_command = commands.add_parser(
        "cancel",
        parents=[common],
        help="cancel an iterable job (running, waiting or in the retry set)",
        description="Mark each JID cancelled (Sidekiq's it-<jid> cancelled field): a running iterable job stops at "
        "its next state flush, runs on_cancel and completes; one not started yet completes as soon as it starts. "
        "A job that is not iterable ignores the mark.",
    )
    cancel_command.add_argument("jids", nargs="+", metavar="JID", help="the job id (24 hex digits)")
    cancel_command.set_defaults(run=_guarded(run_cancel))


def run_busy(args: argparse.Namespace, config: Config) -> int:
    works = list(Workers(config))
    states = iteration_states((work.payload.get("jid") for work in works), config)
    if args.json:
        return print_json([_busy_json(work, states) for work in works])
    rows = []
    for work in works:
        jid = str(work.payload.get("jid") or "")
        state = states.get(jid)
        rows.append([
            jid,
            work.payload.get("wrapped") or work.payload.get("class") or "",
            work.queue,
            work.process_id,
            when(work.run_at, args.utc) if work.run_at else "",
            short(work.arguments_line, 40),
            *(_iteration_cells(state, work.run_at) if state else ("", "", "")),
        ])  # fmt: skip
    print_table(["JID", "CLASS", "QUEUE", "PROCESS", "STARTED", "ARGS", "RUN", "CURSOR", "RUNTIME"], rows)
    return 0


def _iteration_cells(state: IterationState, run_at: float | None) -> tuple[str, str, str]:
    run = f"{state.executions} (cancelled)" if state.cancelled else str(state.executions)
    return run, short(json.dumps(state.cursor, ensure_ascii=False), 30), duration(runtime_so_far(state, run_at))


def _busy_json(work: Work, states: dict[str, IterationState]) -> dict[str, Any]:
    state = states.get(str(work.payload.get("jid") or ""))
    iteration = None
    if state is not None:
        iteration = {
            "executions": state.executions,
            "cursor": state.cursor,
            "runtime": round(runtime_so_far(state, work.run_at), 3),
            "cancelled_at": state.cancelled_at,
        }
    return {
        "process": work.process_id,
        "thread": work.thread_id,
        "queue": work.queue,
        "run_at": work.run_at,
        "payload": work.payload,
        "iteration": iteration,
    }


def run_cancel(args: argparse.Namespace, config: Config) -> int:
    for jid in args.jids:  # all checked before any is cancelled
        if not JID.fullmatch(jid):
            raise KiqError(f"not a job id: {jid!r:.80}; give the job's jid (24 hex digits), as kiq busy lists it")
    results = []
    lines = []
    for jid in args.jids:
        try:
            before, unreadable = read(config.redis, jid), None
        except ValueError as exc:  # written by another producer: cancelled all the same, and said
            before, unreadable = None, exc
        cancelled_at = cancel(jid, config)
        again = before is not None and before.cancelled
        started = before is not None or unreadable is not None
        results.append({"jid": jid, "cancelled_at": cancelled_at, "started": started, "again": again})
        if unreadable is not None:
            lines.append(f"{jid}: cancelled (its saved state could not be read, so it will not walk: {unreadable})")
        elif again:
            lines.append(f"{jid}: already cancelled at {when(cancelled_at, args.utc)}")
        elif before is None:
            lines.append(
                f"{jid}: cancelled; it has no iteration state yet, so it stops when it starts or at its first state "
                "flush (a job that is not iterable, or finished already, ignores this)"
            )
        else:
            lines.append(f"{jid}: cancelled; it stops at its next state flush (run {before.executions})")
    return report(args, {"cancelled": results}, "\n".join(lines))
