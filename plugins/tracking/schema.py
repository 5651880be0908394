"""The tracking tables in a database: the engine for a URL, and the schema made (or completed) on first use."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import Engine, create_engine, event, insert, inspect, select
from sqlalchemy.exc import DBAPIError, IntegrityError

from .models import Base, Cursor, Event, Task


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


class Schema:
    """The tracking tables of one engine, made once per process by ``ensure`` (and by any process that finds them
    missing: safe while others use the database)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._ready = False
        self._lock = threading.Lock()

    def ensure(self) -> None:
        """Create the tables and the cursor row if missing (idempotent)."""
        with self._lock:
            if self._ready:
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
            self._ready = True

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
