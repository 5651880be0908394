"""The tracking writer against real databases (SQLite and the PostgreSQL of KIQ_TEST_DATABASE_URL): a string or
value the database cannot store, or a row it refuses, costs no other job its status; and the updates' callbacks
(the acknowledgement holds) run once, in the writer thread, only when the update is committed or given up."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

from kiq.plugins.tracking.models import Event
from kiq.plugins.tracking.store import Store
from kiq.plugins.tracking.writer import Update, Writer
from tests.support import wait_until
from tests.tracking_support import PrivatePostgres

OTHERS = 100  # other jobs' updates in the batch that holds the bad one
BAD_AT = 37  # where in the batch the bad update goes
REPLACEMENT = "\ufffd"


@pytest.fixture
def store(tracking_db_url: str) -> Iterator[Store]:
    store = Store(tracking_db_url)
    store.init_schema()
    yield store
    store.engine.dispose()


def batch_writer(store: Store, **options: Any) -> Writer:
    """A writer that writes only when flushed, so everything submitted before ``flush`` is one batch."""
    return Writer(store, interval=3600, **options)


def rows(store: Store) -> dict[str, Any]:
    with store.connect() as conn:
        found = conn.execute(
            select(Event.job_id, Event.status, Event.job_class, Event.params, Event.messages, Event.last_error)
        )
        return {row.job_id: row for row in found}


def other_update(n: int, status: str, version: int) -> Update:
    return Update(f"other-{n:03}", None, "Enroll", [n, {"name": f"product {n}"}], status, version, 1,
                  messages=[{"at": 1.0, "text": f"{status} {n}"}])  # fmt: skip


def write_batch_with(writer: Writer, bad: Update, status: str, version: int) -> None:
    updates = [other_update(n, status, version) for n in range(OTHERS)]
    updates.insert(BAD_AT, bad)
    for update in updates:
        writer.submit(update)
    assert writer.flush(30)


# -- what the database cannot store ------------------------------------------------------------------
def with_bad(field: str, bad: str, status: str, version: int) -> Update:
    update = Update("bad-job", None, "Enroll", [1, {"name": "ok"}], status, version, 1)
    if field == "last_error":
        update.last_error = f"boom{bad}!"
    elif field == "message":
        update.messages = [{"at": 1.0, "text": f"step{bad}!"}]
    elif field == "params":
        update.params = [1, {"name": ["deep", f"x{bad}y"]}]
    elif field == "params_key":
        update.params = [1, {f"k{bad}": "v"}]
    elif field == "job_class":
        update.job_class = f"Enroll{bad}"
    return update


def stored_field(row: Any, field: str) -> Any:
    return {
        "last_error": lambda: row.last_error,
        "message": lambda: row.messages[-1]["text"],
        "params": lambda: row.params[1]["name"][1],
        "params_key": lambda: next(iter(row.params[1])),
        "job_class": lambda: row.job_class,
    }[field]()


CLEANED = {"last_error": "boom?!", "message": "step?!", "params": "x?y", "params_key": "k?", "job_class": "Enroll?"}


@pytest.mark.parametrize("bad", ["\x00", "\ud800"], ids=["nul", "lone-surrogate"])
@pytest.mark.parametrize("field", list(CLEANED))
def test_an_unstorable_character_costs_no_other_job_its_status(store: Store, field: str, bad: str) -> None:
    writer = batch_writer(store)
    try:
        write_batch_with(writer, with_bad(field, bad, "working", 5), "enqueued", 0)  # inserts
        first = rows(store)
        write_batch_with(writer, with_bad(field, bad, "finished", 6), "working", 5)  # updates of the same rows
        second = rows(store)
    finally:
        writer.close(5)
    expected = CLEANED[field].replace("?", REPLACEMENT)
    for written, status in ((first, "enqueued"), (second, "working")):
        assert len(written) == OTHERS + 1, "updates of other jobs were lost"
        assert {row.status for job_id, row in written.items() if job_id != "bad-job"} == {status}
        assert stored_field(written["bad-job"], field) == expected
    assert second["bad-job"].status == "finished"


def test_a_job_class_longer_than_its_column_is_cut_and_costs_no_other_job_its_status(store: Store) -> None:
    writer = batch_writer(store)
    try:
        write_batch_with(writer, Update("bad-job", None, "C" * 300, [1], "working", 5, 1), "enqueued", 0)
    finally:
        writer.close(5)
    written = rows(store)
    assert len(written) == OTHERS + 1  # PostgreSQL refuses a string longer than VARCHAR(200)
    assert written["bad-job"].job_class == "C" * 200


def test_non_finite_numbers_are_stored_as_null(store: Store) -> None:
    writer = batch_writer(store)
    nan = Update("bad-job", None, "Enroll", [float("nan"), {"x": float("inf")}], "working", 5, 1)
    try:
        write_batch_with(writer, nan, "enqueued", 0)
    finally:
        writer.close(5)
    written = rows(store)
    assert len(written) == OTHERS + 1  # NaN is not JSON: PostgreSQL refuses the batch's document
    assert written["bad-job"].params == [None, {"x": None}]


def test_cleaning_leaves_the_jobs_own_args_alone(store: Store) -> None:
    args = [1, {"k\x00": ["x\ud800"]}]
    writer = batch_writer(store)
    try:
        writer.submit(Update("bad-job", None, "Enroll", args, "working", 5, 1))
        assert writer.flush(30)
    finally:
        writer.close(5)
    assert args == [1, {"k\x00": ["x\ud800"]}]  # the job's payload is not changed under it
    assert rows(store)["bad-job"].params == [1, {f"k{REPLACEMENT}": [f"x{REPLACEMENT}"]}]


def test_other_text_is_stored_as_it_is(store: Store) -> None:
    text = "é ü 漢字 \U0001f600 tab\t, newline\n, a backslash \\ and the text \\u0000 and \\\\u0000"
    writer = batch_writer(store)
    try:
        writer.submit(
            Update("job", None, "Enroll", [text, {text: text}], "failed", 6, 1, text, [{"at": 1.0, "text": text}])
        )
        assert writer.flush(30)
    finally:
        writer.close(5)
    row = rows(store)["job"]
    assert (row.params, row.last_error, row.messages[0]["text"]) == ([text, {text: text}], text, text)


# -- a row the database refuses ------------------------------------------------------------------------
REFUSE_SQLITE = [
    f"CREATE TRIGGER kiq_test_refuse_{action} BEFORE {action} ON kiq_tracking_events "
    "WHEN NEW.job_id LIKE 'refused%' BEGIN SELECT RAISE(ABORT, 'job refused by a test trigger'); END"
    for action in ("INSERT", "UPDATE")
]
REFUSE_POSTGRESQL = [
    "CREATE FUNCTION kiq_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF NEW.job_id LIKE 'refused%' THEN RAISE EXCEPTION 'job refused by a test trigger'; END IF; "
    "RETURN NEW; END $$",
    "CREATE TRIGGER kiq_test_refuse BEFORE INSERT OR UPDATE ON kiq_tracking_events "
    "FOR EACH ROW EXECUTE FUNCTION kiq_test_refuse()",
]
UNREFUSE = {
    "sqlite": ["DROP TRIGGER kiq_test_refuse_INSERT", "DROP TRIGGER kiq_test_refuse_UPDATE"],
    "postgresql": ["DROP TRIGGER kiq_test_refuse ON kiq_tracking_events", "DROP FUNCTION kiq_test_refuse()"],
}


@pytest.fixture
def refusing_store(store: Store) -> Iterator[Store]:
    """The store, with a real trigger that makes the database refuse any row whose job_id starts with 'refused'."""
    dialect = store.engine.dialect.name
    with store.engine.begin() as conn:
        for statement in REFUSE_POSTGRESQL if dialect == "postgresql" else REFUSE_SQLITE:
            conn.execute(text(statement))
    yield store
    with store.engine.begin() as conn:  # the PostgreSQL schema lives for the whole session
        for statement in UNREFUSE[dialect]:
            conn.execute(text(statement))


def test_rows_the_database_refuses_are_dropped_alone_and_logged(
    refusing_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    updates = [other_update(n, "working", 5) for n in range(OTHERS)]
    updates.insert(BAD_AT, Update("refused-1", None, "Enroll", [1], "working", 5, 1))
    updates.insert(80, Update("refused-2", None, "Enroll", [2], "working", 5, 1))
    writer = batch_writer(refusing_store)
    try:
        with caplog.at_level(logging.ERROR, "kiq.tracking"):
            for update in updates:
                writer.submit(update)
            assert writer.flush(60)
    finally:
        writer.close(5)
    written = rows(refusing_store)
    assert sorted(written) == sorted(f"other-{n:03}" for n in range(OTHERS))
    assert {row.status for row in written.values()} == {"working"}
    refusals = [record.getMessage() for record in caplog.records if "refused" in record.getMessage()]
    assert len(refusals) == 2, refusals
    for job_id, refusal in zip(("refused-1", "refused-2"), refusals, strict=True):
        assert job_id in refusal and "job refused by a test trigger" in refusal


def test_callbacks_of_a_refused_row_run_when_it_is_given_up(refusing_store: Store) -> None:
    calls = Calls()
    writer = batch_writer(refusing_store)
    try:
        for job_id in ("job-1", "refused", "job-2"):
            writer.submit(Update(job_id, None, "Enroll", [1], "working", 5, 1, callbacks=[calls.callback(job_id)]))
        assert writer.flush(30)
    finally:
        writer.close(5)
    assert calls.names() == ["job-1", "job-2", "refused"]  # each once: written, or given up for good
    assert sorted(rows(refusing_store)) == ["job-1", "job-2"]


# -- callbacks -----------------------------------------------------------------------------------------
class Calls:
    """Records callback calls: which, in what thread, and what a fresh connection saw at that moment."""

    def __init__(self, url: str | None = None) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str, str | None]] = []
        self.reader = Store(url) if url else None

    def callback(self, name: str, job_id: str | None = None) -> Callable[[], None]:
        def call() -> None:
            seen = None
            if self.reader is not None and job_id is not None:
                event = self.reader.event(job_id)
                seen = event and event["status"]
            with self.lock:
                self.calls.append((name, threading.current_thread().name, seen))

        return call

    def names(self) -> list[str]:
        with self.lock:
            return sorted(name for name, _, _ in self.calls)


def test_callbacks_run_once_in_the_writer_thread_after_the_commit(store: Store, tracking_db_url: str) -> None:
    calls = Calls(tracking_db_url)
    writer = Writer(store, interval=0.01)
    try:
        for n in range(20):
            update = Update(f"job-{n}", None, "Enroll", [n], "finished", 6, 1)
            update.callbacks.append(calls.callback(f"job-{n}", f"job-{n}"))
            writer.submit(update)
        assert writer.flush(30)
    finally:
        writer.close(5)
        assert calls.reader is not None
        calls.reader.engine.dispose()
    assert calls.names() == sorted(f"job-{n}" for n in range(20))
    # each saw its own row committed (through another connection) when it ran
    assert {(thread, seen) for _, thread, seen in calls.calls} == {("kiq-tracking-writer", "finished")}


def test_merged_updates_run_each_callback_once(store: Store) -> None:
    calls = Calls()
    writer = batch_writer(store)
    try:
        for n, update in enumerate([
            Update("job", None, "Enroll", [1], "working", 5, 1),
            Update("job", messages=[{"at": 1.0, "text": "halfway"}]),
            Update("job", None, "Enroll", [1], "finished", 6),
        ]):  # fmt: skip
            update.callbacks.append(calls.callback(f"callback-{n}"))
            writer.submit(update)
        assert writer.pending == 1  # merged
        assert writer.flush(30)
        assert writer.flush(1)  # nothing is called again
    finally:
        writer.close(5)
    assert calls.names() == ["callback-0", "callback-1", "callback-2"]
    assert rows(store)["job"].status == "finished"


def test_a_raising_callback_stops_neither_the_others_nor_the_writer(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    calls = Calls()

    def boom() -> None:
        raise RuntimeError("callback exploded")

    writer = batch_writer(store)
    try:
        with caplog.at_level(logging.ERROR, "kiq.tracking"):
            first = Update("job-1", None, "Enroll", [1], "finished", 6, 1, callbacks=[boom, calls.callback("after")])
            writer.submit(first)
            writer.submit(Update("job-2", None, "Enroll", [2], "finished", 6, 1, callbacks=[boom]))
            assert writer.flush(30)
            writer.submit(Update("job-3", None, "Enroll", [3], "finished", 6, 1, callbacks=[calls.callback("later")]))
            assert writer.flush(30)
    finally:
        writer.close(5)
    assert calls.names() == ["after", "later"]
    assert sorted(rows(store)) == ["job-1", "job-2", "job-3"]
    raised = [record for record in caplog.records if record.exc_info and "callback exploded" in str(record.exc_info[1])]
    assert len(raised) == 2


# -- callbacks and outages -----------------------------------------------------------------------------
@dataclass
class Outage:
    url: str
    end: Callable[[], None]


@pytest.fixture(params=["sqlite", "postgresql"])
def outage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Outage]:
    """A database that is down now: a SQLite file in a directory that does not exist yet, or a private PostgreSQL
    server stopped as in a crash. ``end()`` brings it back."""
    if request.param == "postgresql":
        server: PrivatePostgres = request.getfixturevalue("private_postgres")
        server.stop("immediate")
        yield Outage(server.url, server.start)
        return
    directory = tmp_path / "not-yet"
    yield Outage(f"sqlite:///{directory}/tracking.db", directory.mkdir)


def test_callbacks_wait_out_an_outage_and_run_once_when_written(
    outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    calls = Calls()
    store = Store(outage.url)
    writer = Writer(store, interval=0.01)
    try:
        with caplog.at_level(logging.WARNING, "kiq.tracking"):
            for n in range(5):
                writer.submit(Update(f"job-{n}", None, "Enroll", [n], "working", 5, 1))
                writer.submit(Update(f"job-{n}", callbacks=[calls.callback(f"w{n}")]))  # merged into it
            wait_until(lambda: "database unavailable" in caplog.text, 30, message="the outage to be noticed")
            # more for the same jobs while the first ones are put back and retried: they merge
            for n in range(5):
                writer.submit(Update(f"job-{n}", status="finished", version=6, callbacks=[calls.callback(f"f{n}")]))
            # retried (backoff 0.2, then 0.4 s: at 0.2 and 0.6 s after the first failure, within this window) and still
            # not written; the window ends before the next retry, at 1.4 s, which the flush below then waits for
            assert not writer.flush(0.8)
            assert calls.names() == [] and writer.pending == 5
            outage.end()
            assert writer.flush(30)
            wait_until(lambda: "database is back" in caplog.text, 5, message="the recovery to be logged")
        assert calls.names() == sorted([f"w{n}" for n in range(5)] + [f"f{n}" for n in range(5)])
        assert {event["status"] for event in map(store.event, [f"job-{n}" for n in range(5)])} == {"finished"}
    finally:
        writer.close(5)
        store.engine.dispose()


def test_callbacks_of_updates_dropped_past_max_pending_run_then(tmp_path: Path) -> None:
    calls = Calls()
    directory = tmp_path / "not-yet"
    store = Store(f"sqlite:///{directory}/tracking.db")
    writer = Writer(store, interval=0.01, max_pending=3)
    try:
        for n in range(5):
            writer.submit(Update(f"job-{n}", None, "Enroll", [n], "working", 5, callbacks=[calls.callback(f"job-{n}")]))
        # the two oldest are given up for good: their callbacks run (in the writer thread) during the outage
        wait_until(lambda: calls.names() == ["job-0", "job-1"], 15, message="the dropped updates' callbacks")
        assert {thread for _, thread, _ in calls.calls} == {"kiq-tracking-writer"}
        assert writer.pending == 3
        directory.mkdir()
        assert writer.flush(30)
    finally:
        writer.close(5)
        store.engine.dispose()
    assert calls.names() == [f"job-{n}" for n in range(5)]  # each exactly once


def test_callbacks_of_what_close_could_not_write_do_not_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    calls = Calls()
    directory = tmp_path / "not-yet"
    store = Store(f"sqlite:///{directory}/tracking.db")
    writer = Writer(store, interval=0.01)
    writer.submit(Update("job", None, "Enroll", [1], "finished", 6, 1, callbacks=[calls.callback("job")]))
    thread = writer._thread
    assert thread is not None
    with caplog.at_level(logging.ERROR, "kiq.tracking"):
        writer.close(0.5)
    assert "1 job status updates could not be written before shutdown" in caplog.text
    # the writer thread has ended, so nothing retries: stronger than the 1.5 s a retrying writer (backoff 0.2,
    # 0.4, 0.8 s) would have needed to write, which this test used to wait out
    wait_until(lambda: not thread.is_alive(), 5, message="the writer thread to end")
    directory.mkdir()  # the database is back, but the writer has stopped
    assert calls.names() == [] and store.event("job") is None
    writer.close(10)  # as at exit: a new writer thread writes what was left, still without its callbacks
    assert store.event("job") is not None and calls.names() == []
    store.engine.dispose()
