"""Reads and writes of the tracking tables (SQLAlchemy 2.0 Core on the ORM models; SQLite and PostgreSQL): the
``Store`` of one database URL. Its tables are made on first use (schema.py); a batch of status updates is written
by upsert.py, which also numbers every write (the cursor), after storable.py replaced what a database cannot store.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, Select, delete, func, insert, select, update
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from .models import JOB_CLASS_LENGTH, NAME_LENGTH, Event, Task
from .schema import Schema, make_engine
from .statuses import DONE_STATUSES, ENQUEUED, STATUSES
from .storable import storable
from .upsert import allocate, storable_document, write_updates
from .writer import Update

EVENT_COLUMNS = (
    Event.job_id,
    Event.status,
    Event.params,
    Event.messages,
    Event.attempts,
    Event.last_error,
    Event.result,
    Event.progress,
    Event.created_at,
    Event.updated_at,
    Event.seq,
)


class Store:
    """The tracking database of one URL; creates its tables on first use."""

    # errors that mean "the database is not reachable or not writable right now": the writer keeps the updates
    outage_errors = (OperationalError, InterfaceError, PoolTimeoutError, ConnectionError)

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.schema = Schema(self.engine)

    def init_schema(self) -> None:
        """Create the tables and the cursor row if missing (idempotent; safe while others use the database)."""
        self.schema.ensure()

    def connect(self) -> Connection:
        self.schema.ensure()
        return self.engine.connect()

    def begin_write(self) -> Any:
        self.schema.ensure()
        return self.engine.begin()

    # -- writes -------------------------------------------------------------------------------------
    def create_task(self, task: dict[str, Any], events: list[dict[str, Any]]) -> None:
        """Insert a task and its events (status enqueued) in one transaction. Its name and job class are stored
        as ``apply`` stores text (storable.py), cut to their columns' length."""
        task = {
            **task,
            "name": storable(task["name"])[:NAME_LENGTH],
            "job_class": storable(task["job_class"])[:JOB_CLASS_LENGTH],
        }
        with self.begin_write() as conn:
            first = allocate(conn, len(events))
            conn.execute(insert(Task).values(**task))
            rows = [
                {
                    **row,
                    "task_id": task["id"],
                    "job_class": task["job_class"],
                    "status": ENQUEUED,
                    "messages": [],
                    "attempts": 0,
                    "version": 0,
                    "created_at": task["created_at"],
                    "updated_at": task["created_at"],
                    "seq": seq,
                }
                for seq, row in enumerate(events, first)
            ]
            if rows:
                conn.execute(insert(Event), rows)

    def record_push_error(self, task_id: str, error: str, dropped_jids: Sequence[str] = ()) -> None:
        """Note on the task that pushing failed, and remove events of jobs that were never pushed."""
        with self.begin_write() as conn:
            values: dict[str, Any] = {"push_error": error} if error else {}
            if dropped_jids:
                conn.execute(delete(Event).where(Event.job_id.in_(dropped_jids)))
                values["total"] = Task.total - len(dropped_jids)
            conn.execute(update(Task).where(Task.id == task_id).values(**values))

    def apply(self, updates: Sequence[Update]) -> None:
        """Write a batch of merged updates: status only where its version is not older than the stored one.
        What the database cannot store is replaced first, in the updates themselves (``make_storable``)."""
        document = storable_document(updates)
        with self.begin_write() as conn:
            write_updates(conn, updates, document)

    # -- reads --------------------------------------------------------------------------------------
    def tasks(self, task_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Summaries (counts per status, done fraction, cursor) of the tasks that exist, by id."""
        ids = list(dict.fromkeys(task_ids))
        if not ids:
            return {}
        with self.connect() as conn:
            found = _summaries(conn, select(Task).where(Task.id.in_(ids)))
        return {task_id: found[task_id] for task_id in ids if task_id in found}

    def recent_tasks(self, offset: int, limit: int, name: str | None = None) -> list[dict[str, Any]]:
        """Summaries (as ``tasks`` makes them) of the newest tasks, newest first: ``limit`` of them, after the
        ``offset`` newest; only tasks whose name contains ``name`` (in any case) when given. One page is read
        (LIMIT/OFFSET on the ``created_at`` index), never the whole table."""
        query = select(Task).order_by(Task.created_at.desc(), Task.id.desc()).offset(offset).limit(limit)
        if name:  # as names are stored (create_task): a NUL or a lone surrogate would match nothing, or fail
            query = query.where(Task.name.icontains(storable(name), autoescape=True))
        with self.connect() as conn:
            return list(_summaries(conn, query).values())

    def task(self, task_id: str, with_events: bool = True) -> dict[str, Any] | None:
        """One task's summary, and its events (in job order) unless ``with_events`` is False."""
        summary = self.tasks([task_id]).get(task_id)
        if summary is not None and with_events:
            with self.connect() as conn:
                rows = conn.execute(select(*EVENT_COLUMNS).where(Event.task_id == task_id).order_by(Event.id))
                summary["events"] = [_event_json(row) for row in rows]
        return summary

    def task_events(self, task_id: str, offset: int, limit: int, status: str | None = None) -> list[dict[str, Any]]:
        """One page of a task's events in job order (``limit`` after the first ``offset``), only those of
        ``status`` when given; an unknown task has none."""
        query = select(*EVENT_COLUMNS).where(Event.task_id == task_id)
        if status is not None:
            query = query.where(Event.status == status)
        with self.connect() as conn:
            rows = conn.execute(query.order_by(Event.id).offset(offset).limit(limit))
            return [_event_json(row) for row in rows]

    def events_since(self, task_id: str, since: int, limit: int = 1000) -> dict[str, Any] | None:
        """Events of a task changed after cursor ``since``, oldest change first; None if the task is unknown.

        The answer's ``cursor`` is the one to send next time; ``more`` says the limit cut the answer short."""
        with self.connect() as conn:
            if conn.execute(select(Task.id).where(Task.id == task_id)).first() is None:
                return None
            rows = list(
                conn.execute(
                    select(*EVENT_COLUMNS)
                    .where(Event.task_id == task_id, Event.seq > since)
                    .order_by(Event.seq)
                    .limit(limit + 1)
                )
            )
        more = len(rows) > limit
        events = [_event_json(row) for row in rows[:limit]]
        return {"task_id": task_id, "events": events, "cursor": events[-1]["seq"] if events else since, "more": more}

    def event(self, job_id: str) -> dict[str, Any] | None:
        """One job's event (for jobs tracked on their own, with ``track: True``)."""
        with self.connect() as conn:
            row = conn.execute(select(Event.task_id, *EVENT_COLUMNS).where(Event.job_id == job_id)).first()
        return None if row is None else {**_event_json(row), "task_id": row.task_id}


def _summaries(conn: Connection, tasks: Select[Task]) -> dict[str, dict[str, Any]]:
    """The summaries of the tasks ``tasks`` selects, by id, in its order: each with its counts per status."""
    found = {
        task.id: {
            "id": task.id,
            "name": task.name,
            "job_class": task.job_class,
            "created_at": task.created_at,
            "total": task.total,
            "push_error": task.push_error,
            "counts": dict.fromkeys(STATUSES, 0),
            "cursor": 0,
        }
        for task in conn.execute(tasks)
    }
    if found:
        counts = conn.execute(
            select(Event.task_id, Event.status, func.count(), func.max(Event.seq))
            .where(Event.task_id.in_(list(found)))
            .group_by(Event.task_id, Event.status)
        )
        for task_id, status, count, max_seq in counts:
            summary = found[task_id]
            summary["counts"][status] = count
            summary["cursor"] = max(summary["cursor"], max_seq or 0)
    for summary in found.values():
        done = sum(summary["counts"][status] for status in DONE_STATUSES)
        summary["done"] = done
        summary["progress"] = done / summary["total"] if summary["total"] else 1.0
        summary["complete"] = done >= summary["total"]
    return found


def _event_json(row: Any) -> dict[str, Any]:
    return {
        "job_id": row.job_id,
        "status": row.status,
        "params": row.params,
        "messages": row.messages,
        "attempts": row.attempts,
        "last_error": row.last_error,
        "result": _result(row.result),
        "progress": row.progress,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "seq": row.seq,
    }


def _result(text: str | None) -> Any:
    """The stored result record as JSON data: ``{"value": ...}`` or ``{"error": ...}``; None when there is none."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:  # not written by kiq: shown as it is rather than failing the whole answer
        return {"error": f"unreadable result record: {text[:200]}"}
