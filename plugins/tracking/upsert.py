"""Writing a batch of merged status updates (writer.py): one statement on PostgreSQL, read, merge and write
elsewhere; and the numbering of every write.

Every write transaction starts by bumping the single ``kiq_tracking_cursor`` row (``allocate``) and numbers its rows
from that. The row lock serialises writers, so seq values become visible in the order they were handed out: a
poller that saw seq N has seen every change numbered below N. A database SEQUENCE would not give that
(a transaction holding N-1 can commit after one holding N), and a poll between the two would skip N-1 forever.
Writes are batched, so one lock round per batch is cheap.

What a database cannot store (storable.py) is replaced in every string and float of a batch before writing; the
check is one scan of the batch's JSON text, so a clean batch (the usual case) costs little more.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select, text, update

from .models import JOB_CLASS_LENGTH, Cursor, Event
from .statuses import ENQUEUED
from .storable import ESCAPED_NUL, LONE_SURROGATE, make_storable
from .writer import Update

MAX_MESSAGES = 100  # per event: the newest are kept
NO_STATUS = -1  # the version a messages-only update carries in PG_UPSERT: lower than any stored version


# write_updates on PostgreSQL: the whole batch in one statement (one JSON parameter, no per-row binding or
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


def storable_document(updates: Sequence[Update]) -> str:
    """The batch as the JSON document PG_UPSERT reads, after replacing in the updates themselves what the database
    cannot store (``make_storable``) if they hold any."""
    document = _batch_json(updates)
    if document is None:
        make_storable(updates)
        document = _batch_json(updates)
        if document is None:
            raise ValueError("a status update holds values that cannot be stored")
    return document


def write_updates(conn: Connection, updates: Sequence[Update], document: str) -> None:
    """Write the batch (``document``: its ``storable_document``) in the transaction of ``conn``: status only where
    its version is not older than the stored one."""
    first = allocate(conn, len(updates))
    if conn.dialect.name == "postgresql":
        conn.execute(PG_UPSERT, {"first": first, "batch": document})
    else:
        _read_modify_write(conn, updates, first)


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


def _read_modify_write(conn: Connection, updates: Sequence[Update], first: int) -> None:
    """``write_updates`` anywhere: read the stored rows, merge in Python, insert the new and update the changed.
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


def allocate(conn: Connection, count: int) -> int:
    """Reserve ``count`` cursor values (locking the cursor row until commit); returns the first."""
    bump = update(Cursor).where(Cursor.id == 1).values(value=Cursor.value + count).returning(Cursor.value)
    last: int = conn.execute(bump).scalar_one()
    return last - count + 1
