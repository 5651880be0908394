"""The Client: normalize a job, run the client middleware, check and encode it, and push it (kiq.job_writes
writes it with Sidekiq 7's keys)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from . import sink
from .arguments import ArgumentPlan
from .arity import Arity, check_arity, wrong_count
from .config import config_or_default
from .errors import InvalidJobError, JobArgumentError
from .failures import UNREACHABLE
from .job_options import accepted_options, refuse_near_misses_of_declared
from .job_writes import refuse_oversized, write_jobs
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
from .plan import plan_of
from .reliable_push import behind_held, held, hold

if TYPE_CHECKING:
    import redis

    from .config import Config


# a kiq.Job subclass: the client reads its kiq_name, get_options() and plan (kiq.plan); it does not import kiq.job
JobClass = type[Any]


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
            check_arity(job, arity)
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
                    raise wrong_count(template, arity, len(job_args), f" in args[{index}]")
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
            job_plan = plan_of(job_class)
            arity, plan = job_plan.arity, job_plan.arguments
            if "kwargs" in job:
                _check_kwargs(job)
            declared = self.config.job_options
            if declared:
                accepted = accepted_options.get(declared)
                if accepted is None or not accepted.issuperset(job):
                    refuse_near_misses_of_declared(job, declared)
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
            check_arity(job, arity, f" in args[{index}]")
        if plan is not None:
            plan.encode(job)
        converted_args.append(job["args"])
        converted_kwargs.append(job.get("kwargs"))
    return converted_args, converted_kwargs


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
