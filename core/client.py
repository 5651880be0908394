"""The Client: normalize a job, run the client middleware, check and encode it, push it with Sidekiq 7's keys.

Immediate jobs: ``SADD queues <q>`` + ``LPUSH queue:<q> <json>``; scheduled jobs: ``ZADD schedule <at> <json>``;
both in one pipelined round trip, retried once when a failover made the server read-only.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import redis as redis_py

from . import sink
from .arguments import ArgumentPlan
from .config import config_or_default
from .errors import ConfigError, InvalidJobError, JobArgumentError, NotReplicated, PayloadTooLarge
from .failures import UNREACHABLE
from .keys import QUEUES, SCHEDULE, Keyspace, keyspace
from .payload import (
    DEFAULT_OPTIONS,
    check_args,
    check_job,
    encode_checked,
    finite_seconds,
    new_jid,
    new_jids,
    wire_time,
)
from .pipeline import PerPool, run_pipeline
from .redis import ENCODING_ERRORS, is_cluster, pool_of
from .reliable_push import behind_held, held, hold
from .settings import MIN_MAX_PAYLOAD_BYTES, did_you_mean

if TYPE_CHECKING:
    import redis

    from .config import Config


# a kiq.Job subclass: the client reads its kiq_name, get_options() and _kiq_arity; it does not import kiq.job
JobClass = type[Any]

# the fields of a Sidekiq 7 payload: never taken for a misspelt option (``args`` is a near miss of ``tags``)
PAYLOAD_FIELDS = frozenset(
    {"class", "args", "jid", "queue", "retry", "created_at", "enqueued_at", "at", "retry_queue", "retry_for",
     "backtrace", "dead", "tags", "error_message", "error_class", "failed_at", "retried_at", "retry_count",
     "error_backtrace", "wrapped", "bid", "kwargs"}
)  # fmt: skip


class Arity(NamedTuple):
    """What arguments a job class's ``perform`` takes; found once, when the class is defined."""

    counts: range  # how many positional ones: range(1, 3) for perform(number, mode="ok"); to sys.maxsize with *args
    signature: str  # "perform(number, mode='ok')", for the error message
    parameters: inspect.Signature  # without self: says why a push with keyword arguments does not fit
    keywords_required: bool  # a keyword-only parameter without a default: every push is checked by name
    by_name: dict[str, int]  # the parameters a keyword can give: their position, or sys.maxsize if keyword-only
    required: tuple[tuple[str, int], ...]  # the parameters without a default, and their position (same rule)
    any_keyword: bool  # perform takes **kwargs


class Client:
    """Pushes jobs to Redis; ``Job.perform_async`` and friends use one on the default config (or theirs).
    ``redis`` sends the pushes to another Redis than the config's (Sidekiq's ``Client.via``)."""

    def __init__(self, config: Config | None = None, redis: redis.Redis | None = None) -> None:
        self.config = config_or_default(config)
        self._redis = redis

    @property
    def redis(self) -> redis.Redis:
        return self._redis if self._redis is not None else self.config.redis

    def push(self, item: dict[str, Any]) -> str | None:
        """Push one job: ``{"class": MyJob or "Name", "args": [...], "queue"?, "at"?, ...}``.

        Returns the jid, or None when a client middleware halted the push.
        """
        encoded = self.encode(item)
        if encoded is None:
            return None
        self._write([encoded])
        return encoded[1]

    def push_bulk(self, item: dict[str, Any], batch_size: int = 1000) -> list[str | None]:
        """Push one job per entry of ``item["args"]`` (a list of argument lists), ``batch_size`` per round trip.

        ``item["at"]`` may be one timestamp or a list with one per job. Every job goes through the client
        middleware, the check and the encoding before anything is written, so a bad value anywhere writes
        nothing. Returns the jids in order, None where a middleware dropped the job.
        """
        with self.encode_bulk(item, batch_size) as (jids, batches):
            for batch in batches:
                self._write(batch)
        return jids

    def encode(self, item: dict[str, Any], later: int = 0) -> EncodedJob | None:
        """One job normalized, through the client middleware, checked and encoded: what ``push`` writes (None:
        a middleware halted it). Shared with kiq.AsyncClient, which writes it without blocking.

        ``later``: the first ``later`` positional arguments are stand-ins that a plugin replaces in the encoded
        text before the job is pushed (a workflow step's previous result): the count check counts them, the typed
        arguments' conversion leaves them alone (their values are converted when the job runs)."""
        job_class, job, arity, plan = self._normalize(item)
        if (
            arity is not None
            and ("kwargs" in job or arity.keywords_required or len(job["args"]) not in arity.counts)
            and job.get("check_args") is not False
        ):  # the usual push (positional arguments of a right count) calls nothing more
            _check_arity(job, arity)
        if plan is not None:
            plan.encode(job, skip=later)
        return self._encode_through_chain(job_class, job)

    @contextmanager
    def encode_bulk(
        self, item: dict[str, Any], batch_size: int = 1000
    ) -> Iterator[tuple[list[str | None], list[list[EncodedJob]]]]:
        """``push_bulk``'s jobs, every one encoded before any is written: ``(jids, batches)``, inside the
        ``kiq_push_bulk`` hooks' context (the writes belong in it). ``item["kwargs"]``, if given, is a list of one
        dict of keyword arguments per job (``{}`` for none)."""
        all_args = item.get("args")
        if not isinstance(all_args, list) or not all(isinstance(a, list) for a in all_args):
            raise InvalidJobError("push_bulk takes 'args' as a list of argument lists, e.g. [[1], [2]]")
        all_kwargs = item.get("kwargs")
        if all_kwargs is not None and not (isinstance(all_kwargs, list) and len(all_kwargs) == len(all_args)):
            raise InvalidJobError("push_bulk takes 'kwargs' as a list of one dict per job, as long as 'args'")
        if "jid" in item:
            raise InvalidJobError("push_bulk makes a jid per job; do not pass 'jid'")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        at = item.get("at")
        if isinstance(at, list) and len(at) != len(all_args):
            raise InvalidJobError(f"push_bulk: {len(at)} 'at' values for {len(all_args)} jobs")
        times = None if at is None else _bulk_times(at, len(all_args))
        base = {key: value for key, value in item.items() if key not in ("args", "at", "kwargs")}
        job_class, template, arity, plan = self._normalize({**base, "args": []})
        if all_kwargs is not None or plan is not None:  # each job's arguments made and checked before any is pushed
            all_args, all_kwargs = _bulk_arguments(template, all_args, all_kwargs, arity, plan)
        elif arity is not None and template.get("check_args") is not False:
            for index, job_args in enumerate(all_args):  # before any middleware runs: a wrong count pushes nothing
                if len(job_args) not in arity.counts:
                    raise _wrong_count(template, arity, len(job_args), f" in args[{index}]")
        no_middleware = self.config.client_middleware.idle()
        if no_middleware:  # else a middleware may change any field of any job: each is checked in full
            check_job(template)  # the fields every job shares, once; then only each job's own arguments
        now = self._wire_now()  # one enqueued_at for the jobs written without middleware, as Sidekiq's per batch
        plugins = self.config.plugins
        with plugins.enter(
            plugins.notify("kiq_push_bulk", config=self.config, queue=template["queue"], count=len(all_args))
        ):
            encoded_jobs: list[EncodedJob] = []
            jids: list[str | None] = []
            for index, (job_args, jid) in enumerate(zip(all_args, new_jids(len(all_args)), strict=True)):
                kwargs = None if all_kwargs is None else all_kwargs[index]
                if kwargs:
                    job = {**template, "args": job_args, "kwargs": kwargs, "jid": jid}
                else:
                    job = {**template, "args": job_args, "jid": jid}
                if times is not None:
                    job["at"] = times[index]
                if no_middleware:
                    check_args(job_args, template["class"], kwargs)
                    encoded: EncodedJob | None = _encode(job, now)
                else:
                    encoded = self._encode_through_chain(job_class, job)
                jids.append(None if encoded is None else encoded[1])
                if encoded is not None:
                    encoded_jobs.append(encoded)
            refuse_oversized(encoded_jobs, self.config.get("max_payload_bytes"))  # before any is written
            yield jids, [encoded_jobs[start : start + batch_size] for start in range(0, len(encoded_jobs), batch_size)]

    # -- internals ----------------------------------------------------------------------------------
    def _normalize(
        self, item: dict[str, Any]
    ) -> tuple[JobClass | str, dict[str, Any], Arity | None, ArgumentPlan | None]:
        """Sidekiq's normalize_item: validate the shape, merge the class's options, stringify class and queue.
        Also what the arguments must match and how they convert (kiq.arguments): None for a wire name (a Ruby
        job, or a retry the poller pushes again: its arguments are in their JSON form already)."""
        if not isinstance(item, dict):
            raise InvalidJobError(f"a job item must be a dict, got {type(item).__name__}")
        job_class = item.get("class")
        if isinstance(job_class, type) and isinstance(getattr(job_class, "kiq_name", None), str):
            options: dict[str, Any] = job_class.get_options()  # type: ignore[attr-defined]
            job = {**options, **item, "class": job_class.kiq_name}  # type: ignore[attr-defined]
            arity: Arity | None = getattr(job_class, "_kiq_arity", None)
            plan: ArgumentPlan | None = getattr(job_class, "_kiq_arguments", None)
            if "kwargs" in job:
                _check_kwargs(job)
            declared = self.config.job_options
            if declared:
                accepted = _accepted.get(declared)
                if accepted is None or not accepted.issuperset(job):
                    _refuse_near_misses_of_declared(job, declared)
        elif isinstance(job_class, str) and job_class:
            job = {**DEFAULT_OPTIONS, **item}
            arity = plan = None
        else:
            raise InvalidJobError(f"a job item needs 'class': a Job subclass or a wire name, got {job_class!r:.80}")
        if not isinstance(job.get("args"), list):
            raise InvalidJobError(f"job 'args' must be a list, got {job.get('args')!r:.80}")
        if "at" in job:
            job["at"] = finite_seconds(job["at"], "job 'at'")
        if "jid" in job and not isinstance(job["jid"], str):
            raise InvalidJobError(f"job 'jid' must be a string, got {job['jid']!r:.80}")
        if not isinstance(job.get("queue"), str) or not job["queue"]:
            raise InvalidJobError(f"job 'queue' must be a non-empty string, got {job.get('queue')!r:.80}")
        if "retry_for" in job:
            job["retry_for"] = int(finite_seconds(job["retry_for"], "job 'retry_for'"))
        job.setdefault("jid", new_jid())
        if "created_at" not in job:
            job["created_at"] = self._wire_now()
        return job_class, job, arity, plan

    def _wire_now(self) -> float | int:
        """The time now as a payload carries it (``sidekiq_wire``: float seconds, or Sidekiq 8's integer ms)."""
        return wire_time(time.time(), self.config.sidekiq_wire)

    def _encode_through_chain(self, job_class: JobClass | str, job: dict[str, Any]) -> EncodedJob | None:
        """The job through the client middleware, then checked and encoded as the innermost layer: a refusal is
        raised at each middleware's ``yield``, and what is written is what was checked (a change a middleware makes
        after its ``yield`` is not). None when a middleware dropped the job."""
        chain = self.config.client_middleware
        if chain.idle():
            check_job(job)
            return _encode(job, self._wire_now())
        encoded: list[EncodedJob] = []

        def encode() -> dict[str, Any]:
            check_job(job)
            encoded.append(_encode(job, self._wire_now()))
            return job

        redis = self.redis if sink.current is None or self.config.redis_url else None  # fake mode: no server
        if chain.invoke((job_class, job, job["queue"], redis), encode) is None:
            return None
        return encoded[0]

    def _write(self, jobs: list[EncodedJob]) -> None:
        """Write the batch (``write_jobs``); with ``reliable_push``, held in memory while Redis is unreachable."""
        if sink.current is not None:  # kiq.testing's fake or inline mode
            sink.current.write(jobs)
            return

        connection = self.redis
        if held and behind_held(connection, jobs, self.config, send_now=True):  # after the jobs held in an outage
            return
        try:
            write_jobs(connection, jobs, self.config)
        except UNREACHABLE as error:
            if not hold(connection, jobs, self.config, error, partial(write_jobs, connection, config=self.config)):
                raise


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
    """The commands that write ``jobs``, for one pipelined round trip: ``ZADD schedule`` for the scheduled ones,
    one ``LPUSH`` per queue for the others, with ``SADD queues`` unless ``listed`` (``listed_queues``) says this
    process added the queue within ``QUEUE_LISTED_FOR``; then, with ``push_replicas``, a ``WAIT`` for that many
    replicas (asynchronous replication loses what a failover finds unreplicated). ``note_listed`` after the write.
    ``keys``: the keyspace of the Redis written to."""
    now = time.monotonic()
    replicas = config.get("push_replicas")  # not config.push_replicas: a setting read as an attribute costs 0.4 µs
    if len(jobs) == 1 and jobs[0][2] is None and not replicas:  # a single push, the common case
        queue, _, _, data = jobs[0]
        if len(data) > SURELY_ALLOWED:  # reading the setting costs 0.15 µs: not for the usual small job
            refuse_oversized(jobs, config.get("max_payload_bytes"))
        push = ("LPUSH", keys.queue(queue), data)
        return [("SADD", keys.key(QUEUES), queue), push] if _unlisted(listed, queue, now) else [push]
    refuse_oversized(jobs, config.get("max_payload_bytes"))
    scheduled: dict[str, float] = {}
    queued: dict[str, list[str]] = {}
    for queue, _, at, data in jobs:
        if at is None:
            queued.setdefault(queue, []).append(data)
        else:
            scheduled[data] = at
    commands: list[tuple[Any, ...]] = []
    if scheduled:
        commands.append(("ZADD", keys.key(SCHEDULE), *(item for data, at in scheduled.items() for item in (at, data))))
    for queue, payloads in queued.items():
        if _unlisted(listed, queue, now):
            commands.append(("SADD", keys.key(QUEUES), queue))
        commands.append(("LPUSH", keys.queue(queue), *payloads))
    if replicas:
        commands.append(("WAIT", replicas, int(config.push_replicas_timeout * 1000)))
    return commands


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


def refuse_near_misses(names: Iterable[Any], options: Collection[str], owner: str) -> None:
    """Sidekiq lets any option travel in the payload for middleware to read, so an unknown option is no error; but
    one that is a near miss of ``options`` is a typo that would be ignored silently (``queu`` pushes to ``default``)."""
    for name in names:
        if isinstance(name, str) and name not in options and name not in PAYLOAD_FIELDS:
            hint = did_you_mean(name, options)
            if hint:
                raise ConfigError(f"{owner}: unknown job option {name!r}{hint}")


# per set of options declared by plugins, the names a push of a job class found not to be a near miss of one: a
# push compares its keys with this set, so difflib runs once per new name, not on every push
_accepted: dict[frozenset[str], set[str]] = {}


def _refuse_near_misses_of_declared(job: dict[str, Any], declared: frozenset[str]) -> None:
    """Check the names of a job not seen before (options of its class or its ``.set()``) against the options its
    config's plugins declared, which are not known where the class is defined."""
    refuse_near_misses(job, declared, str(job["class"]))
    _accepted.setdefault(declared, set(declared | PAYLOAD_FIELDS)).update(job)


def _check_kwargs(job: dict[str, Any], where: str = "kwargs") -> None:
    """A job's keyword arguments: a dict whose keys are strings (``{}`` is dropped: the payload stays Sidekiq's)."""
    kwargs = job["kwargs"]
    if not isinstance(kwargs, dict):
        raise InvalidJobError(f"{job['class']}: {where} must be a dict of keyword arguments, got {kwargs!r:.80}")
    for key in kwargs:
        if type(key) is not str:
            raise JobArgumentError(
                f"{job['class']}: keyword argument names must be strings (JSON object keys), got {key!r:.80} in "
                f"{where}; nothing was pushed"
            )
    if not kwargs:
        del job["kwargs"]


def _check_arity(job: dict[str, Any], arity: Arity, where: str = "") -> None:
    """Refuse a push whose arguments ``perform`` could not take: by count, or by binding when keywords are in play."""
    kwargs = job.get("kwargs")
    count = len(job["args"])
    if kwargs is None and not arity.keywords_required:
        if count not in arity.counts:
            raise _wrong_count(job, arity, count, where)
        return
    if _fits(arity, count, kwargs or {}):  # the common case, cheaply: Signature.bind costs ~4 µs
        return
    try:
        arity.parameters.bind(*job["args"], **(kwargs or {}))
    except TypeError as exc:
        raise InvalidJobError(
            f"{job['class']}: {arity.signature} cannot take these arguments{where}: {exc}; nothing was pushed (the "
            "option check_args=False turns this check off)"
        ) from None


def _fits(arity: Arity, count: int, kwargs: dict[str, Any]) -> bool:
    """Whether ``count`` positional arguments and ``kwargs`` bind to ``perform`` (as ``Signature.bind`` would say)."""
    if count >= arity.counts.stop:
        return False
    by_name = arity.by_name
    for key in kwargs:
        position = by_name.get(key)
        if position is None:
            if not arity.any_keyword:
                return False
        elif position < count:  # given twice
            return False
    return all(position < count or name in kwargs for name, position in arity.required)


def _bulk_arguments(
    template: dict[str, Any],
    all_args: list[list[Any]],
    all_kwargs: list[Any] | None,
    arity: Arity | None,
    plan: ArgumentPlan | None,
) -> tuple[list[list[Any]], list[dict[str, Any] | None] | None]:
    """push_bulk's arguments with keywords or typed values: each job's checked (keys, arity) and converted."""
    check = arity is not None and template.get("check_args") is not False
    converted_args: list[list[Any]] = []
    converted_kwargs: list[dict[str, Any] | None] = []
    for index, job_args in enumerate(all_args):
        job: dict[str, Any] = {"class": template["class"], "args": job_args}
        if all_kwargs is not None and all_kwargs[index]:
            job["kwargs"] = all_kwargs[index]
            _check_kwargs(job, f"kwargs[{index}]")
        if check:
            assert arity is not None
            _check_arity(job, arity, f" in args[{index}]")
        if plan is not None:
            plan.encode(job)
        converted_args.append(job["args"])
        converted_kwargs.append(job.get("kwargs"))
    return converted_args, converted_kwargs


def _wrong_count(job: dict[str, Any], arity: Arity, count: int, where: str = "") -> InvalidJobError:
    counts = arity.counts
    if counts.stop == sys.maxsize:
        expected = f"at least {counts.start}"
    elif len(counts) == 1:
        expected = str(counts.start)
    else:
        expected = f"{counts.start} {'or' if len(counts) == 2 else 'to'} {counts.stop - 1}"
    noun = "argument" if expected == "1" or expected.endswith(" 1") else "arguments"
    return InvalidJobError(
        f"{job['class']}: {arity.signature} takes {expected} {noun}, got {count}"
        f"{where}; nothing was pushed (the option check_args=False turns this check off)"
    )


# A job ready to write: (queue, jid, ``at`` or None, its JSON). A plain tuple: a NamedTuple costs 8x as much to
# build, on the path of every push.
EncodedJob = sink.EncodedJob


def _bulk_times(at: Any, count: int) -> list[float]:
    """push_bulk's ``at``: one time for every job, or a list of one per job; all checked before any job is pushed."""
    if isinstance(at, list):
        return [finite_seconds(value, f"push_bulk 'at'[{index}]") for index, value in enumerate(at)]
    return [finite_seconds(at, "push_bulk 'at'")] * count


def _encode(job: dict[str, Any], now: float | int) -> EncodedJob:
    """Stamp and encode a checked job as it goes to Redis: ``enqueued_at`` for the queue, or the schedule's score
    without ``at`` and ``enqueued_at`` (the poller stamps it when the job is due), as Sidekiq writes them."""
    if "at" in job:
        at = finite_seconds(job["at"], "job 'at'")  # again: a middleware may have changed it
        wire = {key: value for key, value in job.items() if key != "at" and key != "enqueued_at"}
        return job["queue"], str(job["jid"]), at, encode_checked(wire)
    job["enqueued_at"] = now  # a finite number: the check before needs no second look
    return job["queue"], str(job["jid"]), None, encode_checked(job)
