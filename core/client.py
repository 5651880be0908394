"""The Client: normalize a job, run the client middleware, check its arguments, push it with Sidekiq 7's keys.

Immediate jobs: ``SADD queues <q>`` + ``LPUSH queue:<q> <json>``; scheduled jobs: ``ZADD schedule <at> <json>``;
both in one pipelined round trip, retried once when a failover made the server read-only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis as redis_py

from .job import DEFAULT_OPTIONS, Job
from .payload import check_args, dumps, new_jid, new_jids
from .plugin_manager import entered

if TYPE_CHECKING:
    import redis

    from .config import Config


class Client:
    """Pushes jobs to Redis; ``Job.perform_async`` and friends use the config's client."""

    def __init__(self, config: Config | None = None, redis: redis.Redis | None = None) -> None:
        if config is None:
            from .config import default_config

            config = default_config()
        self.config = config
        self._redis = redis

    @property
    def redis(self) -> redis.Redis:
        return self._redis if self._redis is not None else self.config.redis

    def push(self, item: dict[str, Any]) -> str | None:
        """Push one job: ``{"class": MyJob or "Name", "args": [...], "queue"?, "at"?, ...}``.

        Returns the jid, or None when a client middleware halted the push.
        """
        job_class, job = self._normalize(item)
        pushed = self._through_chain(job_class, job)
        if pushed is None:
            return None
        self._write([pushed])
        return str(pushed["jid"])

    def push_bulk(self, item: dict[str, Any], batch_size: int = 1000) -> list[str | None]:
        """Push one job per entry of ``item["args"]`` (a list of argument lists), ``batch_size`` per round trip.

        ``item["at"]`` may be one timestamp or a list with one per job. Every job goes through the client
        middleware and the argument check before anything is written, so a bad argument anywhere writes
        nothing. Returns the jids in order, None where a middleware dropped the job.
        """
        all_args = item.get("args")
        if not isinstance(all_args, list) or not all(isinstance(a, list) for a in all_args):
            raise TypeError("push_bulk takes 'args' as a list of argument lists, e.g. [[1], [2]]")
        if "jid" in item:
            raise ValueError("push_bulk makes a jid per job; do not pass 'jid'")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        at = item.get("at")
        if isinstance(at, list) and len(at) != len(all_args):
            raise ValueError(f"push_bulk: {len(at)} 'at' values for {len(all_args)} jobs")
        base = {key: value for key, value in item.items() if key not in ("args", "at")}
        job_class, template = self._normalize({**base, "args": []})
        hook = self.config.plugins.hook
        with entered(hook.kiq_push_bulk(config=self.config, queue=template["queue"], count=len(all_args))):
            payloads: list[dict[str, Any]] = []
            jids: list[str | None] = []
            for index, (job_args, jid) in enumerate(zip(all_args, new_jids(len(all_args)), strict=True)):
                job = {**template, "args": job_args, "jid": jid}
                if at is not None:
                    job["at"] = float(at[index] if isinstance(at, list) else at)
                pushed = self._through_chain(job_class, job)
                jids.append(None if pushed is None else str(pushed["jid"]))
                if pushed is not None:
                    payloads.append(pushed)
            for start in range(0, len(payloads), batch_size):
                self._write(payloads[start : start + batch_size])
        return jids

    # -- internals ----------------------------------------------------------------------------------
    def _normalize(self, item: dict[str, Any]) -> tuple[type[Job] | str, dict[str, Any]]:
        """Sidekiq's normalize_item: validate the shape, merge the class's options, stringify class and queue."""
        if not isinstance(item, dict):
            raise TypeError(f"a job item must be a dict, got {type(item).__name__}")
        job_class = item.get("class")
        if isinstance(job_class, type) and issubclass(job_class, Job):
            job = {**job_class.get_options(), **item, "class": job_class.kiq_name}
        elif isinstance(job_class, str) and job_class:
            job = {**DEFAULT_OPTIONS, **item}
        else:
            raise TypeError(f"a job item needs 'class': a Job subclass or a wire name, got {job_class!r}")
        if not isinstance(job.get("args"), list):
            raise TypeError(f"job 'args' must be a list, got {job.get('args')!r}")
        if "at" in job and (isinstance(job["at"], bool) or not isinstance(job["at"], int | float)):
            raise TypeError(f"job 'at' must be epoch seconds (a number), got {job['at']!r}")
        if "jid" in job and not isinstance(job["jid"], str):
            raise TypeError(f"job 'jid' must be a string, got {job['jid']!r}")
        if not isinstance(job.get("queue"), str) or not job["queue"]:
            raise TypeError(f"job 'queue' must be a non-empty string, got {job.get('queue')!r}")
        if "retry_for" in job:
            job["retry_for"] = int(job["retry_for"])
        job.setdefault("jid", new_jid())
        job.setdefault("created_at", time.time())
        return job_class, job

    def _through_chain(self, job_class: type[Job] | str, job: dict[str, Any]) -> dict[str, Any] | None:
        chain = self.config.client_middleware
        if not chain.entries:
            check_args(job["args"], job["class"])
            return job

        def checked() -> dict[str, Any]:  # after the middleware, which may have changed the args
            check_args(job["args"], str(job["class"]))
            return job

        return chain.invoke((job_class, job, job["queue"], self.redis), checked)

    def _write(self, payloads: list[dict[str, Any]]) -> None:
        """One pipelined round trip for the batch (immediate jobs by queue, scheduled ones into ``schedule``)."""
        scheduled: dict[str, float] = {}
        queued: dict[str, list[str]] = {}
        now = time.time()
        for payload in payloads:
            if "at" in payload:
                at = payload.pop("at")
                payload.pop("enqueued_at", None)  # not enqueued yet; the poller stamps it
                scheduled[dumps(payload)] = float(at)
            else:
                payload["enqueued_at"] = now
                queued.setdefault(payload["queue"], []).append(dumps(payload))

        def send(connection: redis.Redis) -> None:
            pipe = connection.pipeline(transaction=False)
            if scheduled:
                pipe.zadd("schedule", scheduled)
            for queue, jobs in queued.items():
                pipe.sadd("queues", queue)
                pipe.lpush(f"queue:{queue}", *jobs)
            pipe.execute()

        _retry_on_failover(send, self.redis)


def _retry_on_failover(operation: Callable[[Any], None], connection: redis.Redis) -> None:
    """Run ``operation`` once more on fresh connections if a failover left us talking to a replica."""
    try:
        operation(connection)
    except redis_py.ReadOnlyError:
        connection.connection_pool.disconnect()
        operation(connection)
