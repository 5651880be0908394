"""A Tracker: one config's tracking database and background writer, and what you do with them: create a task of
many jobs, add progress messages, query tasks and events."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from kiq import AsyncClient, Call, Client, Config, Job, JobFunction, JobSetter
from kiq.ext import new_jid

from .middleware import Reservation, describe, params_of, reservation
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
        args_list: Iterable[list[Any] | Call],
        name: str | None = None,
    ) -> str:
        """Create a task of one job per argument list (or ``kiq.Call(*args, **kwargs)``) and push the jobs; return
        the task id.

        The task and all its events (status ``enqueued``) are committed before the first job is pushed, so
        the first poll sees every job. If pushing fails, the task's ``push_error`` says why and the exception
        propagates. ``job`` may be ``MyJob.set(queue="low")`` to pass options. From asyncio code:
        ``await tracker.aio.create_task(...)``.
        """
        task = self._new_task(job, args_list, name)
        with task.pushing():
            pushed = Client(self.config).push_bulk(task.item)
        task.check(pushed)
        return task.id

    @property
    def aio(self) -> AsyncTracker:
        """``create_task`` for asyncio code: the database writes run in a thread, the push on the event loop."""
        return AsyncTracker(self)

    def _new_task(
        self,
        job: type[Job] | JobFunction[Any, Any] | JobSetter,
        args_list: Iterable[list[Any] | Call],
        name: str | None = None,
    ) -> NewTask:
        """The task and its events, committed; and the item that pushes its jobs (the arguments in their JSON
        forms, as the events keep them)."""
        setter = job if isinstance(job, JobSetter) else job.set()
        job_class = setter.job_class.kiq_name
        calls = [
            setter.encode_arguments(call.args, call.kwargs) if isinstance(call, Call) else setter.encode_arguments(call)
            for call in args_list
        ]
        args = [call_args for call_args, _ in calls]
        jids = [new_jid() for _ in args]
        task_id = secrets.token_hex(TASK_ID_BYTES)
        task = {"id": task_id, "name": name or job_class, "job_class": job_class, "total": len(args)}
        task["created_at"] = time.time()
        # the options too: the events keep the arguments as kiq shows them (an encrypted one hidden, params_of)
        options = {**setter.job_class.get_options(), **setter.options}
        events = [{**options, "args": a, "kwargs": k} for a, k in calls]
        self.store.create_task(
            task, [{"job_id": jid, "params": params_of(e, self.config)} for jid, e in zip(jids, events, strict=True)]
        )
        item = {**setter.options, "class": setter.job_class, "args": args, "task_id": task_id}
        if any(kwargs for _, kwargs in calls):
            item["kwargs"] = [kwargs for _, kwargs in calls]
        return NewTask(self.store, task_id, jids, item)

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


class NewTask:
    """A task whose rows are committed and whose jobs are being pushed (by the sync or the asyncio client)."""

    def __init__(self, store: Store, task_id: str, jids: list[str], item: dict[str, Any]) -> None:
        self.store = store
        self.id = task_id
        self.jids = jids
        self.item = item

    @contextmanager
    def pushing(self) -> Iterator[None]:
        """Around the push: the tracking client middleware give each job its reserved jid; a failed push is
        recorded on the task."""
        args = self.item["args"]
        token = reservation.set(Reservation(self.id, {id(a): jid for a, jid in zip(args, self.jids, strict=True)}))
        try:
            yield
        except BaseException as exc:
            self.store.record_push_error(self.id, describe(exc))
            raise
        finally:
            reservation.reset(token)

    def check(self, pushed: list[str | None]) -> None:
        """Record on the task what the push did not do as planned."""
        reserved = set(self.jids)
        unknown = [jid for jid in pushed if jid is not None and jid not in reserved]
        dropped = [jid for jid, got in zip(self.jids, pushed, strict=True) if got is None]
        if unknown:  # only if another client middleware replaced the argument lists before ours saw them
            error = f"{len(unknown)} jobs were pushed under jids this task has no events for"
            self.store.record_push_error(self.id, error)
            raise RuntimeError(error)
        if dropped:  # a client middleware dropped these jobs: they will never run
            self.store.record_push_error(self.id, "", dropped)


class AsyncTracker:
    """A Tracker's ``create_task`` for asyncio code (``tracker.aio``)."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    async def create_task(
        self,
        job: type[Job] | JobFunction[Any, Any] | JobSetter,
        args_list: Iterable[list[Any] | Call],
        name: str | None = None,
    ) -> str:
        """``Tracker.create_task`` without blocking the event loop; the same guarantees."""
        task = await asyncio.to_thread(self.tracker._new_task, job, list(args_list), name)
        with task.pushing():
            pushed = await AsyncClient(self.tracker.config).push_bulk(task.item)
        await asyncio.to_thread(task.check, pushed)
        return task.id
