"""A Tracker: one config's tracking database and background writer, and what you do with them: create a task of
many jobs, add progress messages, query tasks and events."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kiq import Client, Config, Job, JobFunction, JobSetter, new_jid

from .middleware import Reservation, describe, reservation
from .writer import Update, Writer

if TYPE_CHECKING:
    from .store import Store

TASK_ID_BYTES = 16  # 128 random bits: task ids are unguessable, so a task id is enough to read a task


class Tracker:
    """Tracking for one Config: its database (``tracking_database_url``) and its background writer."""

    def __init__(self, config: Config) -> None:
        from .store import Store  # SQLAlchemy loads only once tracking is used

        self.config = config
        self.store: Store = Store(config.get("tracking_database_url"))
        self.writer = Writer(
            self.store,
            interval=config.get("tracking_flush_interval"),
            batch_size=config.get("tracking_batch_size"),
            max_pending=config.get("tracking_max_pending"),
        )

    def create_task(
        self,
        job: type[Job] | JobFunction[Any, Any] | JobSetter,
        args_list: Iterable[list[Any]],
        name: str | None = None,
    ) -> str:
        """Create a task of one job per argument list and push the jobs; return the task id.

        The task and all its events (status ``enqueued``) are committed before the first job is pushed, so
        the first poll sees every job. If pushing fails, the task's ``push_error`` says why and the exception
        propagates. ``job`` may be ``MyJob.set(queue="low")`` to pass options.
        """
        setter = job if isinstance(job, JobSetter) else job.set()
        job_class = setter.job_class.kiq_name
        args = [list(job_args) for job_args in args_list]
        jids = [new_jid() for _ in args]
        task_id = secrets.token_hex(TASK_ID_BYTES)
        task = {"id": task_id, "name": name or job_class, "job_class": job_class, "total": len(args)}
        task["created_at"] = time.time()
        self.store.create_task(task, [{"job_id": jid, "params": a} for jid, a in zip(jids, args, strict=True)])
        token = reservation.set(Reservation(task_id, {id(a): jid for a, jid in zip(args, jids, strict=True)}))
        try:
            item = {**setter.options, "class": setter.job_class, "args": args, "task_id": task_id}
            pushed = Client(self.config).push_bulk(item)
        except BaseException as exc:
            self.store.record_push_error(task_id, describe(exc))
            raise
        finally:
            reservation.reset(token)
        reserved = set(jids)
        unknown = [jid for jid in pushed if jid is not None and jid not in reserved]
        dropped = [jid for jid, got in zip(jids, pushed, strict=True) if got is None]
        if unknown:  # only if another client middleware replaced the argument lists before ours saw them
            error = f"{len(unknown)} jobs were pushed under jids this task has no events for"
            self.store.record_push_error(task_id, error)
            raise RuntimeError(error)
        if dropped:  # a client middleware dropped these jobs: they will never run
            self.store.record_push_error(task_id, "", dropped)
        return task_id

    def message(self, job: Job | str, text: str) -> None:
        """Append a progress message to a tracked job's event (a job instance, or its jid)."""
        jid = job if isinstance(job, str) else job.jid
        self.writer.submit(Update(jid, messages=[{"at": time.time(), "text": str(text)}]))

    def task(self, task_id: str, with_events: bool = True) -> dict[str, Any] | None:
        return self.store.task(task_id, with_events)

    def tasks(self, task_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        return self.store.tasks(task_ids)

    def events_since(self, task_id: str, since: int = 0, limit: int = 1000) -> dict[str, Any] | None:
        return self.store.events_since(task_id, since, limit)

    def event(self, job_id: str) -> dict[str, Any] | None:
        return self.store.event(job_id)
