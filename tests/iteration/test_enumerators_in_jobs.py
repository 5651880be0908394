"""The enumerators under the iteration engine (in-process, real Redis): a walk interrupted by the worker's stopping
flag resumes at the item it was about to run, so every row runs exactly once over the runs: SQL keyset (with rows
deleted and inserted between the runs), CSV by byte offset, and an item's error resumes at that item."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Engine, Integer, MetaData, Table, create_engine, delete, insert, select

import kiq

JID = "0123456789abcdef01234567"
ROWS = Table("rows", MetaData(), Column("id", Integer, primary_key=True, autoincrement=False))


class Recorded(kiq.IterableJob, abstract=True):
    """Records each item it runs; sets ``stop`` (the worker's stopping flag) after ``stop_after`` items, and fails
    once on ``fail_on``."""

    done: list[Any]
    stop_after = 0
    fail_on: Any = None
    failed = False

    def each_iteration(self, item: Any, *args: Any) -> None:
        if item == type(self).fail_on and not type(self).failed:
            type(self).failed = True
            raise RuntimeError(f"item {item} fails once")
        type(self).done.append(item)
        if len(type(self).done) == type(self).stop_after and self._stopping is not None:
            self._stopping.set()


def run(job_class: type[Recorded], stopping: threading.Event | None = None) -> str:
    job = job_class()
    job.jid = JID
    job.job = {"class": "Recorded", "jid": JID, "args": [], "queue": "default"}
    job.interrupt_when(stopping)
    try:
        job.perform()
    except kiq.Interrupted:
        return "interrupted"
    except RuntimeError as exc:
        return str(exc)
    return "complete"


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    engine = create_engine(f"sqlite:///{tmp_path / 'rows.db'}")
    ROWS.create(engine)
    with engine.begin() as connection:
        connection.execute(insert(ROWS), [{"id": n} for n in range(0, 6000, 2)])
    return engine


def test_sql_rows_interrupted_resumes_at_its_row_while_rows_come_and_go(config: kiq.Config, engine: Engine) -> None:
    class Walk(Recorded, abstract=True):
        done: list[Any] = []
        stop_after = 1000

        def build_enumerator(self, *, cursor: Any) -> Any:
            rows = kiq.iteration.sql_rows(engine, select(ROWS.c.id), key=ROWS.c.id, batch=300, cursor=cursor)
            return ((row, key) for row, key in rows)

    assert run(Walk, threading.Event()) == "interrupted"
    stopped_at = kiq.iteration.state.read(config.redis, JID)
    assert stopped_at is not None and stopped_at.cursor == 2000  # the 1,001st row: the one not run yet
    with engine.begin() as connection:  # between the runs: rows behind and ahead deleted, others inserted
        connection.execute(delete(ROWS).where(ROWS.c.id.in_([10, 20, 4000, 4002])))
        connection.execute(insert(ROWS), [{"id": 11}, {"id": 4001}])
    assert run(Walk) == "complete"
    first_run = list(range(0, 2000, 2))  # 10 and 20 ran before they were deleted; 11 was inserted behind the walk
    second_run = sorted({*range(2000, 6000, 2), 4001} - {4000, 4002})  # the row inserted ahead of it is walked
    assert Walk.done == first_run + second_run


def test_csv_rows_resume_at_the_row_after_a_stop_and_at_a_failed_row(config: kiq.Config, tmp_path: Path) -> None:
    path = tmp_path / "orders.csv"
    path.write_text("id,total\n" + "".join(f"{n},{n * 1.5}\n" for n in range(500)))

    class Import(Recorded, abstract=True):
        done: list[Any] = []
        stop_after = 123
        fail_on = "321"

        def build_enumerator(self, *, cursor: Any) -> Any:
            return ((row["id"], offset) for row, offset in kiq.iteration.csv_rows(path, cursor, header=True))

    assert run(Import, threading.Event()) == "interrupted"
    assert run(Import) == "item 321 fails once"
    assert run(Import) == "complete"
    assert Import.done == [str(n) for n in range(500)]
