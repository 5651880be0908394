"""Inspection commands of the ``kiq`` CLI: ``stats``, ``queues``, ``retries``/``scheduled``/``dead``, ``processes``.

Each prints a readable table, or JSON with ``--json`` (for scripts), and takes ``-C FILE`` / ``--redis-url``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from ..api import DeadSet, JobSet, ProcessSet, Queue, RetrySet, ScheduledSet, SortedEntry, Stats
from ..config import Config
from ..errors import KiqError
from ..payload import printable

SETS: dict[str, tuple[type[JobSet], str]] = {
    "retries": (RetrySet, "the retry set"),
    "scheduled": (ScheduledSet, "the scheduled set"),
    "dead": (DeadSet, "the dead set"),
}


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    """Register the inspection subcommands on the ``kiq`` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-C", "--config", help="config file (default: kiq.toml or [tool.kiq] in pyproject.toml)")
    common.add_argument("--redis-url", help="Redis to inspect (default: the redis_url setting)")
    common.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")

    stats = commands.add_parser("stats", parents=[common], help="counters and sizes")
    stats.set_defaults(run=_guarded(run_stats))
    queues = commands.add_parser("queues", parents=[common], help="queues with their size and latency")
    queues.set_defaults(run=_guarded(run_queues))

    for command, (_, title) in SETS.items():
        parser = commands.add_parser(command, parents=[common], help=f"list or act on {title}")
        parser.add_argument("-n", "--limit", type=int, default=50, help="list at most N jobs (0: all; default 50)")
        actions = parser.add_mutually_exclusive_group()
        retry_help = "enqueue the job now" if command == "scheduled" else "retry the job now"
        actions.add_argument("--retry", metavar="JID", help=retry_help)
        actions.add_argument("--delete", metavar="JID", help="delete the job")
        actions.add_argument("--clear", action="store_true", help=f"delete every job in {title}")
        if command != "scheduled":
            actions.add_argument("--retry-all", action="store_true", help=f"retry every job in {title}")
        parser.set_defaults(run=_guarded(run_set), set_command=command)

    processes = commands.add_parser("processes", parents=[common], help="live worker processes")
    signals = processes.add_mutually_exclusive_group()
    signals.add_argument("--quiet", metavar="ID", help="stop the process fetching jobs (identity or unique prefix)")
    signals.add_argument("--stop", metavar="ID", help="shut the process down (identity or unique prefix)")
    processes.set_defaults(run=_guarded(run_processes))


def _guarded(command: Callable[[argparse.Namespace, Config], int]) -> Callable[[argparse.Namespace], int]:
    """Load the config, run the command, and turn an unreachable Redis into a one-line error."""

    def run(args: argparse.Namespace) -> int:
        overrides = {"redis_url": args.redis_url} if args.redis_url else {}
        config = Config.load(args.config, **overrides)
        try:
            return command(args, config)
        except redis.RedisError as exc:
            where = config.redis_url or f"the embedded Redis in {config.embedded_dir}"
            raise KiqError(f"cannot talk to Redis at {where}: {exc}") from exc

    return run


# -- commands ---------------------------------------------------------------------------------------------
def run_stats(args: argparse.Namespace, config: Config) -> int:
    stats = Stats(config)
    if args.json:
        return _print_json(stats.as_dict())
    rows = [
        ("Processed", stats.processed),
        ("Failed", stats.failed),
        ("Busy", stats.workers_size),
        ("Enqueued", stats.enqueued),
        ("Scheduled", stats.scheduled_size),
        ("Retries", stats.retry_size),
        ("Dead", stats.dead_size),
        ("Processes", stats.processes_size),
        ("Default queue latency", f"{stats.default_queue_latency:.2f}s"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name + ':':<{width + 1}} {value}")
    return 0


def run_queues(args: argparse.Namespace, config: Config) -> int:
    queues = [(queue.name, queue.size, queue.latency) for queue in Queue.all(config)]
    if args.json:
        return _print_json([{"name": name, "size": size, "latency": latency} for name, size, latency in queues])
    _print_table(["QUEUE", "SIZE", "LATENCY"], [[name, size, f"{latency:.2f}s"] for name, size, latency in queues])
    return 0


def run_set(args: argparse.Namespace, config: Config) -> int:
    set_class, title = SETS[args.set_command]
    job_set = set_class(config)
    if args.retry or args.delete:
        jid = args.retry or args.delete
        entry = job_set.find_job(jid)
        if entry is None:
            raise KiqError(f"no job with jid {jid!r} in {title}")
        done = entry.retry() if args.retry else entry.delete()
        if not done:
            raise KiqError(f"job {jid!r} left {title} meanwhile (another client moved it)")
        action = "retry" if args.retry else "delete"
        return _report(args, {"action": action, "jid": jid}, f"{action}: {jid}")
    if args.clear:
        count = job_set.clear()
        return _report(args, {"action": "clear", "count": count}, f"cleared {count} jobs from {title}")
    if getattr(args, "retry_all", False):
        assert isinstance(job_set, RetrySet | DeadSet)
        count = job_set.retry_all()
        return _report(args, {"action": "retry_all", "count": count}, f"retried {count} jobs from {title}")
    return _list_set(args, job_set, title)


def _list_set(args: argparse.Namespace, job_set: JobSet, title: str) -> int:
    entries: list[SortedEntry] = []
    for entry in job_set:
        if args.limit > 0 and len(entries) >= args.limit:
            break
        entries.append(entry)
    if args.json:
        return _print_json([{"score": entry.score, **entry.as_dict()} for entry in entries])
    when = "DIED" if job_set.name == "dead" else "RUNS"
    rows = [
        [
            entry.jid or "-",
            entry.display_class,
            entry.queue,
            _when(entry.score),
            "" if entry.retry_count is None else entry.retry_count,
            _short(json.dumps(entry.args), 40) if entry.parsed else _short(printable(entry.value), 40),
            _short(f"{entry.error_class}: {entry.error_message}", 50) if entry.error else "",
        ]
        for entry in entries
    ]
    _print_table(["JID", "CLASS", "QUEUE", when, "RETRIED", "ARGS", "ERROR"], rows)
    total = job_set.size
    if total > len(entries):
        print(f"({len(entries)} of {total} in {title}, newest first; --limit 0 lists all)")
    return 0


def run_processes(args: argparse.Namespace, config: Config) -> int:
    processes = ProcessSet(config)
    if args.quiet or args.stop:
        process = processes.get(args.quiet or args.stop)
        if args.quiet:
            process.quiet()
        else:
            process.stop()
        action = "quiet" if args.quiet else "stop"
        message = f"sent {'TSTP (quiet)' if args.quiet else 'TERM (stop)'} to {process.identity}"
        return _report(args, {"action": action, "identity": process.identity}, message)
    listed = list(processes)
    if args.json:
        return _print_json([process.as_dict() for process in listed])
    rows = [
        [
            process.identity,
            process.tag or "",
            ",".join(process.queues),
            f"{process.busy}/{process['concurrency'] or '?'}",
            "quiet" if process.stopping else "running",
            _ago(process.beat),
            _ago(float(process["started_at"] or 0)) if process["started_at"] else "",
            f"{int(process['rss'] or 0) // 1024} MB",
        ]
        for process in listed
    ]
    _print_table(["IDENTITY", "TAG", "QUEUES", "BUSY", "STATE", "BEAT", "STARTED", "RSS"], rows)
    return 0


# -- output -------------------------------------------------------------------------------------------------
def _report(args: argparse.Namespace, result: dict[str, Any], message: str) -> int:
    if args.json:
        return _print_json({"ok": True, **result})
    print(message)
    return 0


def _print_json(data: Any) -> int:
    json.dump(data, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


def _print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if not rows:
        print("(none)")
        return
    cells = [list(headers), *[[str(cell) for cell in row] for row in rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


TIME_UNITS = (("d", 86400), ("h", 3600), ("m", 60))


def _ago(timestamp: float) -> str:
    """``12s ago`` / ``in 3m``."""
    delta = time.time() - timestamp
    size = abs(delta)
    unit, seconds = next(((unit, seconds) for unit, seconds in TIME_UNITS if size >= seconds), ("s", 1))
    amount = f"{int(size // seconds)}{unit}"
    return f"{amount} ago" if delta >= 0 else f"in {amount}"


def _when(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{moment} ({_ago(timestamp)})"
