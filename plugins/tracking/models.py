"""The tracking tables: one ``Task`` per batch created with ``create_task``, one ``Event`` per tracked job.

Times are float epoch seconds, like Sidekiq's own timestamps. ``Event.seq`` is the polling cursor: every write
to an event gives it the next value of the single-row ``kiq_tracking_cursor`` counter, so "events with
seq > N" are exactly the events that changed after a poll that returned cursor N (see store.py for why this
is a counter row and not a database sequence).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Float, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# BIGINT autoincrement is not an alias of ROWID in SQLite; INTEGER is.
BigId = BigInteger().with_variant(Integer(), "sqlite")
JOB_CLASS_LENGTH = 200
NAME_LENGTH = 200


class Base(DeclarativeBase):
    pass


class Task(Base):
    """A batch of jobs created in one call; ``total`` is how many jobs it was created with."""

    __tablename__ = "kiq_tracking_tasks"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # 128 random bits, hex
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    job_class: Mapped[str] = mapped_column(String(JOB_CLASS_LENGTH))
    total: Mapped[int] = mapped_column(Integer)
    # indexed for the newest tasks first (the dashboard's list); an older database gets it in place (Store)
    created_at: Mapped[float] = mapped_column(Float, index=True)
    push_error: Mapped[str | None] = mapped_column(Text, default=None)  # set when pushing to Redis failed


class Event(Base):
    """The lifecycle of one job: its status, arguments, progress messages, last error and result."""

    __tablename__ = "kiq_tracking_events"
    __table_args__ = (Index("ix_kiq_tracking_events_task_seq", "task_id", "seq"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(64), unique=True)  # the jid
    task_id: Mapped[str | None] = mapped_column(String(32), default=None)  # None: a job tracked on its own
    job_class: Mapped[str] = mapped_column(String(JOB_CLASS_LENGTH))
    status: Mapped[str] = mapped_column(String(16))
    params: Mapped[Any] = mapped_column(JSON)  # the job's args
    messages: Mapped[list[Any]] = mapped_column(JSON)  # [{"at": epoch, "text": str}, ...]
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # runs started
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    # the results plugin's record of the value the job returned ({"value": ...} or {"error": ...}), as JSON text
    result: Mapped[str | None] = mapped_column(Text, default=None)
    # the latest self.progress(done, total) of the job: {"done", "total", "at"}; None until it reports one
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    # orders status writes that may arrive out of order (run number * 4 + phase, see middleware.py)
    version: Mapped[int] = mapped_column(Integer, default=0)
    seq: Mapped[int] = mapped_column(BigInteger, index=True)


class Cursor(Base):
    """One row: the last ``seq`` handed out."""

    __tablename__ = "kiq_tracking_cursor"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)
