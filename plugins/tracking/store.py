"""Reads and writes of the tracking tables (SQLAlchemy 2.0 Core on the ORM models; SQLite and PostgreSQL).

Every write transaction starts by bumping the single ``kiq_tracking_cursor`` row and numbers its rows from
that. The row lock serialises writers, so seq values become visible in the order they were handed out: a
poller that saw seq N has seen every change numbered below N. A database SEQUENCE would not give that
(a transaction holding N-1 can commit after one holding N), and a poll between the two would skip N-1 forever.
Writes are batched (writer.py), so one lock round per batch is cheap.

What a database cannot store must not cost other jobs their statuses: PostgreSQL refuses NUL in text and jsonb,
no driver can encode a lone surrogate (e.g. "\\ud800") as UTF-8, and NaN or infinity is not JSON. ``apply``
replaces those in every string of a batch (U+FFFD) and every float (None) before writing; the check is one scan
of the batch's JSON text, so a clean batch (the usual case) costs little more.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Select,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from .models import JOB_CLASS_LENGTH, NAME_LENGTH, Base, Cursor, Event, Task
from .statuses import DONE_STATUSES, ENQUEUED, STATUSES
from .writer import Update

MAX_MESSAGES = 100  # per event: the newest are kept
REPLACEMENT = "\ufffd"
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# json.dumps writes NUL as the escape \u0000: a backslash that is not itself escaped (it follows an even number
# of backslashes), then u0000
ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
NO_STATUS = -1  # the version a messages-only update carries in PG_UPSERT: lower than any stored version
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


# Store.apply on PostgreSQL: the whole batch in one statement (one JSON parameter, no per-row binding or
# statements), with the merge rules of _read_modify_write: the status fields only from a version not older
# than the stored one; messages appended (the newest MAX_MESSAGES kept); a progress replaces the stored one;
# messages and progress of unknown jobs dropped; an update that changes nothing leaves the row (and its seq)
# alone. attempts 0 means "not given" (runs start at 1).
# PostgreSQL checks NOT NULL before ON CONFLICT, hence the placeholders for messages-only rows. The writer
# merges updates per job, so no row is proposed twice in one statement (which ON CONFLICT would refuse).
PG_UPSERT = text(f"""
INSERT INTO kiq_tracking_events AS e
    (job_id, task_id, job_class, params, status, version, attempts, last_error, result, progress, messages,
    created_at, updated_at, seq)
SELECT v.job_id, v.task_id, v.job_class, coalesce(v.params, 'null'), coalesce(v.status, '{ENQUEUED}'), v.version,
    coalesce(v.attempts, 0), v.last_error, v.result, v.progress, v.messages, v.at, v.at, :first + v.n
FROM json_to_recordset(CAST(:batch AS json)) AS v(n bigint, job_id text, task_id text, job_class text, params json,
    status text, version int, attempts int, last_error text, result text, progress json, messages json,
    at double precision)
WHERE v.status IS NOT NULL OR EXISTS (SELECT FROM kiq_tracking_events x WHERE x.job_id = v.job_id)
ON CONFLICT (job_id) DO UPDATE SET
    status = CASE WHEN excluded.version >= e.version THEN excluded.status ELSE e.status END,
    version = greatest(excluded.version, e.version),
    attempts = CASE WHEN excluded.version >= e.version AND excluded.attempts > 0
        THEN excluded.attempts ELSE e.attempts END,
    last_error = CASE WHEN excluded.version >= e.version
        THEN coalesce(excluded.last_error, e.last_error) ELSE e.last_error END,
    result = CASE WHEN excluded.version >= e.version THEN coalesce(excluded.result, e.result) ELSE e.result END,
    progress = coalesce(excluded.progress, e.progress),
    messages = CASE WHEN json_array_length(excluded.messages) = 0 THEN e.messages
        ELSE jsonb_path_query_array(coalesce(e.messages::jsonb, '[]') || excluded.messages::jsonb,
                                    '$[last - {MAX_MESSAGES - 1} to last]')::json END,
    updated_at = excluded.updated_at,
    seq = excluded.seq
WHERE excluded.version >= e.version OR json_array_length(excluded.messages) > 0 OR excluded.progress IS NOT NULL
""")


def _batch_json(updates: Sequence[Update]) -> str | None:
    """The batch as the JSON document PG_UPSERT reads; None if it holds something the database cannot store."""
    try:
        document = json.dumps(
            [
                {
                    "n": n,
                    "job_id": u.job_id,
                    "task_id": u.task_id,
                    "job_class": u.job_class,
                    "params": u.params,
                    "status": u.status,
                    "version": NO_STATUS if u.status is None else u.version,
                    "attempts": u.attempts,
                    "last_error": u.last_error,
                    "result": u.result,
                    "progress": u.progress,
                    "messages": u.messages[-MAX_MESSAGES:],
                    "at": u.at,
                }
                for n, u in enumerate(updates)
            ],
            ensure_ascii=False,
            allow_nan=False,
        )
    except ValueError:  # NaN or infinity
        return None
    # cheapest tests first (a 500-update batch: well under a millisecond, next to ~2 ms for json.dumps)
    has_nul = "\\u0000" in document and ESCAPED_NUL.search(document)
    has_surrogate = not document.isascii() and LONE_SURROGATE.search(document)
    if has_nul or has_surrogate or any(len(u.job_class) > JOB_CLASS_LENGTH for u in updates):
        return None
    return document


def make_storable(updates: Sequence[Update]) -> None:
    """Replace in each update, in place, what the database cannot store (see the module doc); job classes are
    cut to the column's length. The nested values are copied, not changed: params are the job's own args."""
    for u in updates:
        u.job_id, u.task_id, u.status = _storable(u.job_id), _storable(u.task_id), _storable(u.status)
        u.job_class = _storable(u.job_class)[:JOB_CLASS_LENGTH]
        u.params, u.last_error, u.messages = _storable(u.params), _storable(u.last_error), _storable(u.messages)
        u.result = _storable(u.result)


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return UNSTORABLE.sub(REPLACEMENT, value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {_storable(key): _storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(item) for item in value]
    return value


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL (readers never wait for the writer) and a busy timeout."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 5})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    connect_args = {"connect_timeout": 5} if url.startswith("postgresql") else {}
    return create_engine(url, pool_pre_ping=True, connect_args=connect_args)


class Store:
    """The tracking database of one URL; creates its tables on first use."""

    # errors that mean "the database is not reachable or not writable right now": the writer keeps the updates
    outage_errors = (OperationalError, InterfaceError, PoolTimeoutError, ConnectionError)

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._schema_ready = False
        self._schema_lock = threading.Lock()

    def init_schema(self) -> None:
        """Create the tables and the cursor row if missing (idempotent; safe while others use the database)."""
        with self._schema_lock:
            if self._schema_ready:
                return
            Base.metadata.create_all(self.engine)
            self._add_missing_columns()
            self._add_missing_indexes()
            try:
                with self.engine.begin() as conn:
                    if conn.execute(select(Cursor.id)).first() is None:
                        conn.execute(insert(Cursor).values(id=1, value=0))
            except IntegrityError:
                pass  # another process inserted it first
            self._schema_ready = True

    def _add_missing_columns(self) -> None:
        """Nullable columns newer than a table made by an older kiq (``result``): added in place, on SQLite and
        PostgreSQL. Another process may add one at the same moment: its ALTER wins, and ours is not needed."""
        present = {column["name"] for column in inspect(self.engine).get_columns(Event.__tablename__)}
        for column in Event.__table__.columns:
            if column.name in present:
                continue
            kind = column.type.compile(dialect=self.engine.dialect)
            try:
                with self.engine.begin() as conn:
                    conn.exec_driver_sql(f"ALTER TABLE {Event.__tablename__} ADD COLUMN {column.name} {kind}")
            except DBAPIError:
                if column.name not in {c["name"] for c in inspect(self.engine).get_columns(Event.__tablename__)}:
                    raise

    def _add_missing_indexes(self) -> None:
        """Indexes of the tasks table newer than a table made by an older kiq (on ``created_at``, for the newest
        tasks first): ``create_all`` makes a table's indexes only with the table. Made in place, on SQLite and
        PostgreSQL (the tasks table has a row per task, not per job: it takes little time). Another process may make
        one at the same moment: its CREATE wins, and ours is not needed."""
        table = Base.metadata.tables[Task.__tablename__]
        present = {index["name"] for index in inspect(self.engine).get_indexes(table.name)}
        for index in table.indexes:
            if index.name in present:
                continue
            try:
                index.create(self.engine)
            except DBAPIError:
                if index.name not in {found["name"] for found in inspect(self.engine).get_indexes(table.name)}:
                    raise

    def connect(self) -> Connection:
        self.init_schema()
        return self.engine.connect()

    def begin_write(self) -> Any:
        self.init_schema()
        return self.engine.begin()

    # -- writes -------------------------------------------------------------------------------------
    def create_task(self, task: dict[str, Any], events: list[dict[str, Any]]) -> None:
        """Insert a task and its events (status enqueued) in one transaction. Its name and job class are stored
        as ``apply`` stores text (see the module doc), cut to their columns' length."""
        task = {
            **task,
            "name": _storable(task["name"])[:NAME_LENGTH],
            "job_class": _storable(task["job_class"])[:JOB_CLASS_LENGTH],
        }
        with self.begin_write() as conn:
            first = _allocate(conn, len(events))
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
        document = _batch_json(updates)
        if document is None:
            make_storable(updates)
            document = _batch_json(updates)
            if document is None:
                raise ValueError("a status update holds values that cannot be stored")
        with self.begin_write() as conn:
            first = _allocate(conn, len(updates))
            if conn.dialect.name == "postgresql":
                conn.execute(PG_UPSERT, {"first": first, "batch": document})
            else:
                _read_modify_write(conn, updates, first)

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
            query = query.where(Task.name.icontains(_storable(name), autoescape=True))
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


def _read_modify_write(conn: Connection, updates: Sequence[Update], first: int) -> None:
    """``Store.apply`` anywhere: read the stored rows, merge in Python, insert the new and update the changed.
    (SQLite is in-process, so the extra statements cost no round trips.)"""
    ids = [u.job_id for u in updates]
    stored = {
        row.job_id: row
        for row in conn.execute(
            select(
                Event.job_id,
                Event.status,
                Event.version,
                Event.attempts,
                Event.last_error,
                Event.result,
                Event.progress,
                Event.messages,
            ).where(Event.job_id.in_(ids))
        )
    }
    inserts: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    for seq, u in enumerate(updates, first):
        messages = u.messages[-MAX_MESSAGES:]
        row = stored.get(u.job_id)
        if row is None:
            if u.status is None:
                continue  # a message or progress for a job nobody tracks
            inserts.append(
                {
                    "job_id": u.job_id,
                    "task_id": u.task_id,
                    "job_class": u.job_class,
                    "params": u.params,
                    "status": u.status,
                    "version": u.version,
                    "attempts": u.attempts or 0,
                    "last_error": u.last_error,
                    "result": u.result,
                    "progress": u.progress,
                    "messages": messages,
                    "created_at": u.at,
                    "updated_at": u.at,
                    "seq": seq,
                }
            )
            continue
        fresh = u.status is not None and u.version >= row.version
        if not fresh and not messages and u.progress is None:
            continue  # an older status (e.g. arriving late after an outage): nothing changes
        changes.append(
            {
                "b_job_id": u.job_id,
                "status": u.status if fresh else row.status,
                "version": u.version if fresh else row.version,
                "attempts": u.attempts if fresh and u.attempts is not None else row.attempts,
                "last_error": u.last_error if fresh and u.last_error is not None else row.last_error,
                "result": u.result if fresh and u.result is not None else row.result,
                "progress": row.progress if u.progress is None else u.progress,
                "messages": (list(row.messages or []) + messages)[-MAX_MESSAGES:],
                "updated_at": u.at,
                "seq": seq,
            }
        )
    if inserts:
        conn.execute(insert(Event), inserts)
    if changes:
        columns: dict[str, Any] = {key: bindparam(key) for key in changes[0] if key != "b_job_id"}
        statement = update(Event).where(Event.job_id == bindparam("b_job_id")).values(**columns)
        conn.execute(statement.execution_options(synchronize_session=False), changes)


def _allocate(conn: Connection, count: int) -> int:
    """Reserve ``count`` cursor values (locking the cursor row until commit); returns the first."""
    bump = update(Cursor).where(Cursor.id == 1).values(value=Cursor.value + count).returning(Cursor.value)
    last: int = conn.execute(bump).scalar_one()
    return last - count + 1


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
