"""Inspection commands of the ``kiq`` CLI: ``stats``, ``queues``, ``retries``/``scheduled``/``dead``, ``processes``.

Each prints a readable table, or JSON with ``--json`` (for scripts), and takes ``-C FILE`` / ``--redis-url``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import redis

from ..api import DeadSet, JobRecord, JobSet, Process, ProcessSet, Queue, RetrySet, ScheduledSet, SortedEntry, Stats
from ..api.fleet import known_queues
from ..config import Config
from ..errors import KiqError
from ..keys import QUEUES, keyspace
from ..paused_queues import paused_names
from ..payload import printable
from ..settings import did_you_mean
from .output import (
    ago,
    duration,
    inspected_config,
    inspection_options,
    names,
    print_json,
    print_table,
    report,
    short,
    when,
)

SETS: dict[str, tuple[type[JobSet], str]] = {
    "retries": (RetrySet, "the retry set"),
    "scheduled": (ScheduledSet, "the scheduled set"),
    "dead": (DeadSet, "the dead set"),
}
Job = TypeVar("Job", bound=JobRecord)


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    """Register the inspection subcommands on the ``kiq`` parser."""
    common = inspection_options()
    limit = argparse.ArgumentParser(add_help=False)
    limit.add_argument("-n", "--limit", type=int, default=50, help="list at most N jobs (0: all; default 50)")

    stats = commands.add_parser("stats", parents=[common], help="counters and sizes")
    stats.set_defaults(run=_guarded(run_stats))
    queues = commands.add_parser(
        "queues",
        parents=[common, limit],
        help="queues with their size, latency and pause; a queue's jobs; clear, pause or unpause a queue",
        description="Without NAME: every queue with its size, latency and whether it is paused. With NAME: the "
        "queue's jobs, newest first (the oldest runs next). 'pause NAME' / 'unpause NAME': every worker stops / "
        "starts again taking jobs from the queue within a second (pushes go on).",
    )
    queues.add_argument("name", nargs="?", metavar="NAME", help="list the jobs of this queue; or pause, unpause")
    queues.add_argument("target", nargs="?", metavar="QUEUE", help="after pause or unpause: the queue")
    queues.add_argument("--clear", metavar="NAME", help="delete every job in the queue NAME (asks on a terminal)")
    queues.add_argument("-y", "--yes", action="store_true", help="clear without asking")
    queues.set_defaults(run=_guarded(run_queues))

    for command, (_, title) in SETS.items():
        parser = commands.add_parser(command, parents=[common, limit], help=f"list or act on {title}")
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
        config = inspected_config(args)
        try:
            return command(args, config)
        except redis.RedisError as exc:
            raise KiqError(f"cannot talk to Redis at {config.redis_url}: {exc}") from exc

    return run


# -- commands ---------------------------------------------------------------------------------------------
def run_stats(args: argparse.Namespace, config: Config) -> int:
    stats = Stats(config)
    if args.json:
        return print_json(stats.as_dict())
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
    if args.clear and args.name:
        raise KiqError("give either NAME (to list its jobs) or --clear NAME, not both")
    if args.clear:
        return _clear_queue(args, known_queue(args.clear, config))
    if args.target is not None:
        if args.name not in PAUSE_ACTIONS:
            raise KiqError(f"kiq queues {args.name} {args.target}: only pause or unpause take a queue after them")
        return _pause(args, args.name, args.target, config)
    if args.name in PAUSE_ACTIONS and Queue(args.name, config).size == 0:
        raise KiqError(f"kiq queues {args.name}: name the queue, as in kiq queues {args.name} QUEUE")
    if args.name:
        return _list_queue(args, known_queue(args.name, config))
    paused = paused_names(config.redis)
    listed, others = _listed_queues(config, everything=args.json)
    queues = [(queue.name, queue.size, queue.latency, queue.name in paused) for queue in listed]
    if args.json:
        return print_json([
            {"name": name, "size": size, "latency": latency, "paused": is_paused}
            for name, size, latency, is_paused in queues
        ])  # fmt: skip
    print_table(
        ["QUEUE", "SIZE", "LATENCY", "PAUSED"],
        [[name, size, f"{latency:.2f}s", "paused" if is_paused else "-"] for name, size, latency, is_paused in queues],
    )
    if others:
        print(f"(and {others:,} paused names of no known queue, not listed: kiq queues --json lists every name)")
    return 0


MAX_UNKNOWN_PAUSED = 10  # paused names of no known queue listed in the table (a paused queue cleared since)


def _listed_queues(config: Config, everything: bool) -> tuple[list[Queue], int]:
    """The queues ``kiq queues`` lists, and how many paused names it leaves out. Any producer can write names into
    the paused set (1,000 of them, one of 100 KB): the table lists the queues Redis knows (the ``queues`` set) and
    those this config serves or a registered class names, paused or not; other paused names (a queue paused,
    then cleared) only while there are few of them, else it counts them. ``everything``: every name (``--json``)."""
    every = Queue.all(config)
    if everything:
        return every, 0
    known = known_queues(config) | set(config.redis.smembers(keyspace(config.redis).key(QUEUES)))
    unknown = [queue for queue in every if queue.name not in known]
    if len(unknown) <= MAX_UNKNOWN_PAUSED:
        return every, 0
    return [queue for queue in every if queue.name in known], len(unknown)


PAUSE_ACTIONS = ("pause", "unpause")


def _pause(args: argparse.Namespace, action: str, name: str, config: Config) -> int:
    """Pause a known queue (a typo is an error, not a pause of nothing), or unpause a paused one."""
    if action == "pause":
        queue = known_queue(name, config)
        changed = queue.pause()
        text = f"paused queue {name!r}" if changed else f"queue {name!r} was already paused"
    else:
        paused = sorted(paused_names(config.redis))
        if name not in paused:
            listed = names(paused)
            raise KiqError(f"queue {name!r} is not paused{did_you_mean(name, paused)}; the paused queues are: {listed}")
        changed = Queue(name, config).unpause()
        text = f"unpaused queue {name!r}"
    return report(args, {"action": action, "queue": name, "changed": changed}, text)


def known_queue(name: str, config: Config) -> Queue:
    """The queue ``name`` if Redis knows it (in the ``queues`` set, or holding jobs): a typo is an error, not an
    empty listing."""
    known = [queue.name for queue in Queue.all(config)]
    queue = Queue(name, config)
    if name not in known and queue.size == 0:
        listed = names(known)
        raise KiqError(f"no queue {name!r}{did_you_mean(name, known)}; the queues are: {listed}")
    return queue


def _clear_queue(args: argparse.Namespace, queue: Queue) -> int:
    question = f"Delete the {queue.size} jobs in queue {queue.name!r}? [y/N] "
    if not args.yes and sys.stdin.isatty() and not _confirm(question):
        print("kiq: nothing deleted", file=sys.stderr)
        return 1
    count = queue.clear()
    result = {"action": "clear", "queue": queue.name, "count": count}
    return report(args, result, f"deleted {count} jobs from queue {queue.name!r}")


def _confirm(question: str) -> bool:
    """Ask on the terminal (on stderr, so ``--json`` output stays clean); only ``y``/``yes`` agrees."""
    sys.stderr.write(question)
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in {"y", "yes"}


def _list_queue(args: argparse.Namespace, queue: Queue) -> int:
    records = _first(queue, args.limit)
    if args.json:
        return print_json([record.as_dict() for record in records])
    _print_jobs(
        records, "ENQUEUED", lambda record: record.unreadable_time("enqueued_at") or record.enqueued_at, args.utc, False
    )
    _print_remainder(len(records), queue.size, f"queue {queue.name!r}")
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
        return report(args, {"action": action, "jid": jid}, f"{action}: {jid}")
    if args.clear:
        count = job_set.clear()
        return report(args, {"action": "clear", "count": count}, f"cleared {count} jobs from {title}")
    if getattr(args, "retry_all", False):
        assert isinstance(job_set, RetrySet | DeadSet)
        count = job_set.retry_all()
        return report(args, {"action": "retry_all", "count": count}, f"retried {count} jobs from {title}")
    return _list_set(args, job_set, title)


def _list_set(args: argparse.Namespace, job_set: JobSet, title: str) -> int:
    entries: list[SortedEntry] = _first(job_set, args.limit)
    if args.json:
        return print_json([{"score": entry.score, **entry.as_dict()} for entry in entries])
    when_header = "DIED" if job_set.name == "dead" else "RUNS"
    _print_jobs(entries, when_header, lambda entry: entry.score, args.utc, show_queue=True)
    _print_remainder(len(entries), job_set.size, title)
    return 0


def _first(jobs: Iterable[Job], limit: int) -> list[Job]:
    """The first ``limit`` jobs (all when ``limit`` is 0), read page by page, not all at once."""
    return list(itertools.islice(jobs, limit if limit > 0 else None))


def _print_jobs(
    jobs: Sequence[Job], when_header: str, moment: Callable[[Job], float | str | None], utc: bool, show_queue: bool
) -> None:
    """One row per job: jid, class, (queue,) ``moment`` as ``when_header`` (a text: why there is no date), retries,
    args, (kwargs,) and error. The KWARGS column is there when a listed job has keyword arguments (a listing without
    any reads as it always did)."""
    show_kwargs = any(job.kwargs for job in jobs)
    rows = [
        [
            job.jid or "-",
            job.display_class,
            *([job.queue] if show_queue else []),
            when(at, utc) if isinstance(at := moment(job), float) else short(at or "", 60),
            "" if job.retry_count is None else job.retry_count,
            short(json.dumps(job.display_args, default=str), 40) if job.parsed else short(printable(job.value), 40),
            *([short(json.dumps(job.display_kwargs), 40) if job.kwargs else ""] if show_kwargs else []),
            short(f"{job.error_class}: {job.error_message}", 50) if job.error_class else "",
        ]
        for job in jobs
    ]
    headers = ["JID", "CLASS", *(["QUEUE"] if show_queue else []), when_header, "RETRIED", "ARGS",
               *(["KWARGS"] if show_kwargs else []), "ERROR"]  # fmt: skip
    print_table(headers, rows)


def _print_remainder(listed: int, total: int, title: str) -> None:
    if total > listed:
        print(f"({listed} of {total} in {title}, newest first; --limit 0 lists all)")


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
        return report(args, {"action": action, "identity": process.identity}, message)
    listed = list(processes)
    if args.json:
        return print_json([process.as_dict() for process in listed])
    rows = [
        [
            process.identity,
            process.tag or "",
            ",".join(process.queues),
            f"{process.busy}/{process['concurrency'] or '?'}",
            _state(process),
            ago(process.beat),
            when(process.started_at, args.utc) if process.started_at is not None else "",
            f"{int(process['rss'] or 0) // 1024} MB",
        ]
        for process in listed
    ]
    print_table(["IDENTITY", "TAG", "QUEUES", "BUSY", "STATE", "BEAT", "STARTED", "RSS"], rows)
    return 0


def _state(process: Process) -> str:
    if process.state == "stale":
        return f"stale (no heartbeat for {duration(process.seconds_since_beat)})"
    return process.state
