"""The write of encoded jobs to Redis, Sidekiq 7's keys: ``SADD queues <q>`` + ``LPUSH queue:<q> <json>`` for
immediate jobs, ``ZADD schedule <at> <json>`` (and ``PUBLISH kiq:poller-wake``) for scheduled ones, in one
pipelined round trip (kiq.Client and kiq.AsyncClient send the same commands); a plugin's ``JobWriter``
(``kiq_job_writer``) may write an immediate job its own way instead, in the same round trip."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import redis as redis_py

from .errors import NotReplicated, PayloadTooLarge
from .keys import QUEUES, SCHEDULE, Keyspace, keyspace, poller_wake
from .pipeline import PerPool, run_pipeline
from .redis import ENCODING_ERRORS, is_cluster, pool_of
from .settings import MIN_MAX_PAYLOAD_BYTES
from .sink import EncodedJob

if TYPE_CHECKING:
    import redis

    from .config import Config
    from .hookspecs import JobWriter


def write_jobs(connection: redis.Redis, jobs: list[EncodedJob], config: Config) -> None:
    """One pipelined round trip that writes ``jobs`` (immediate ones by queue, scheduled ones into ``schedule``)."""
    listed = listed_queues(pool_of(connection))
    commands = write_commands(jobs, config, listed, keyspace(connection))
    try:
        replies = run_pipeline(connection, commands)
    except redis_py.ReadOnlyError:  # a failover left us talking to a replica: once more, on new connections
        if is_cluster(connection):  # a cluster client follows its failovers itself
            raise
        connection.connection_pool.disconnect()
        replies = run_pipeline(connection, commands)
    note_listed(commands, listed)
    check_replicated(commands, replies, jobs, config)


def write_commands(
    jobs: list[EncodedJob], config: Config, listed: dict[str, float], keys: Keyspace
) -> list[tuple[Any, ...]]:
    """The commands that write ``jobs``, for one pipelined round trip: ``ZADD schedule`` for the scheduled ones
    (and the ``PUBLISH`` that wakes the pollers at the earliest one's due time), one ``LPUSH`` per queue for the
    others, with ``SADD queues`` unless ``listed`` (``listed_queues``) says this process added the queue within
    ``QUEUE_LISTED_FOR``; then, with ``push_replicas``, a ``WAIT`` for that many replicas (asynchronous replication
    loses what a failover finds unreplicated). ``note_listed`` after the write. ``keys``: the keyspace of the Redis
    written to."""
    now = time.monotonic()
    replicas = config.get("push_replicas")  # not config.push_replicas: a setting read as an attribute costs 0.4 µs
    writers = config.job_writers
    if len(jobs) == 1 and jobs[0][2] is None and not replicas and not writers:  # a single push, the common case
        queue, _, _, data = jobs[0]
        if len(data) > SURELY_ALLOWED:  # reading the setting costs 0.15 µs: not for the usual small job
            refuse_oversized(jobs, config.get("max_payload_bytes"))
        push = ("LPUSH", keys.queue(queue), data)
        return [("SADD", keys.key(QUEUES), queue), push] if _unlisted(listed, queue, now) else [push]
    refuse_oversized(jobs, config.get("max_payload_bytes"))
    scheduled: dict[str, float] = {}
    queued: dict[str, list[str]] = {}
    written: dict[str, list[tuple[Any, ...]]] = {}  # by queue: the commands of the jobs a plugin writes
    for queue, jid, at, data in jobs:
        if at is not None:
            scheduled[data] = at
            continue
        own = _written_by_plugin(writers, queue, jid, data, keys) if writers else None
        if own is None:
            queued.setdefault(queue, []).append(data)
        else:
            written.setdefault(queue, []).extend(own)
    commands: list[tuple[Any, ...]] = []
    if scheduled:
        commands.append(("ZADD", keys.key(SCHEDULE), *(item for data, at in scheduled.items() for item in (at, data))))
        commands.append(poller_wake(keys, SCHEDULE, min(scheduled.values())))
    for queue in dict.fromkeys([*queued, *written]):
        if _unlisted(listed, queue, now):
            commands.append(("SADD", keys.key(QUEUES), queue))
        if queue in queued:
            commands.append(("LPUSH", keys.queue(queue), *queued[queue]))
        commands += written.get(queue, ())
    if replicas:
        commands.append(("WAIT", replicas, int(config.push_replicas_timeout * 1000)))
    return commands


def _written_by_plugin(
    writers: tuple[JobWriter, ...], queue: str, jid: str, data: str, keys: Keyspace
) -> list[tuple[Any, ...]] | None:
    """The commands of the first plugin that writes this job itself (``kiq_job_writer``), or None."""
    for writer in writers:
        own = writer.commands(queue, jid, data, keys)
        if own is not None:
            return own
    return None


# a job's JSON of at most this many characters is within any max_payload_bytes (at least 1,024 bytes; UTF-8 takes
# at most 4 bytes a character)
SURELY_ALLOWED = MIN_MAX_PAYLOAD_BYTES // 4


def refuse_oversized(jobs: list[EncodedJob], limit: int) -> None:
    """``PayloadTooLarge`` for the first job whose JSON is over ``limit`` bytes (``max_payload_bytes``)."""
    for queue, jid, _, data in jobs:
        if len(data) * 4 > limit and len(data.encode("utf-8", ENCODING_ERRORS)) > limit:
            raise PayloadTooLarge(
                f"job {jid} for queue {queue!r} is {len(data.encode('utf-8', ENCODING_ERRORS)):,} bytes of JSON, over "
                f"max_payload_bytes = {limit:,}; nothing was pushed. Pass large data by reference (a file or object "
                "URL, a database id), or raise max_payload_bytes (KIQ_MAX_PAYLOAD_BYTES)"
            )


# Sidekiq adds a job's queue to the ``queues`` set (what the dashboard and kiq.api list) on every push. Adding a
# member again changes nothing and costs the round trip a second reply (6 % of a single push), so a process adds
# each queue at most once per QUEUE_LISTED_FOR seconds per Redis. The set loses a queue only when the queue is
# cleared (kiq.api.Queue.clear calls forget_listed) or Redis loses its data: the next push a second later lists it
# again. Keyed by connection pool (one Redis); each value maps a queue to when this process last added it.
QUEUE_LISTED_FOR = 1.0
_listed: PerPool[dict[str, float]] = PerPool(dict)


def _unlisted(listed: dict[str, float], queue: str, now: float) -> bool:
    """Whether this push adds ``queue`` to ``queues``: not added by this process within ``QUEUE_LISTED_FOR``."""
    return now - listed.get(queue, -QUEUE_LISTED_FOR) >= QUEUE_LISTED_FOR


def listed_queues(pool: Any) -> dict[str, float]:
    """The queues this process added to ``queues`` on the Redis of ``pool`` (a sync or an asyncio pool), and when."""
    return _listed.get(pool)


def forget_listed(queue: str) -> None:
    """``queue`` was taken out of ``queues``: the next push to it, on any Redis and client, adds it again."""
    for listed in _listed.values():
        listed.pop(queue, None)


def note_listed(commands: list[tuple[Any, ...]], listed: dict[str, float]) -> None:
    """After a write of ``write_commands``: its ``SADD queues`` are done."""
    now = time.monotonic()
    for command in commands:
        if command[0] == "SADD":
            listed[command[2]] = now


def check_replicated(
    commands: list[tuple[Any, ...]], replies: list[Any], jobs: list[EncodedJob], config: Config
) -> None:
    """``NotReplicated`` when the ``WAIT`` that ``write_commands`` added (with ``push_replicas``) came back short."""
    command, confirmed = commands[-1], replies[-1]
    if command[0] == "WAIT" and confirmed < command[1]:
        raise NotReplicated(
            f"{len(jobs)} job(s) written to the Redis master, but {confirmed} of {command[1]} replicas confirmed them "
            f"within {config.push_replicas_timeout:g} s: a failover now could lose them"
        )
