"""The tracking plugin's dashboard tab, called as the dashboard calls it (the ``kiq_web_tabs`` hook, then
``tab.render``), on SQLite and PostgreSQL: the newest tasks a page at a time, filtered by name; a task's counts (those
of ``store.task``) and its jobs a page at a time; one job in full; 404 for unknown and malformed ids; markup, NUL and
lone surrogates handed back as text; the ``created_at`` index added to an older database; a database that is away
raises."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, TypeVar

import pytest
from sqlalchemy import inspect
from sqlalchemy.exc import OperationalError

import kiq
from kiq.plugins.tracking import Tracker
from kiq.plugins.tracking.store import Store
from kiq.plugins.tracking.writer import Update
from kiq.tabs import Code, Facts, Link, Pager, Table, TabView, Text, When
from tests.jobs.tracking import Enroll
from tests.support import render_tab
from tests.tracking_support import PrivatePostgres, track, work_off

B = TypeVar("B")
INDEX = "ix_kiq_tracking_tasks_created_at"
HOUR = 3600.0


def render(config: kiq.Config, path: str = "", **query: str) -> TabView:
    return render_tab(config, "tasks", "Tasks", path, **query)


def blocks(view: TabView, kind: type[B]) -> list[B]:
    return [block for block in view.blocks if isinstance(block, kind)]


def table(view: TabView) -> Table:
    (found,) = blocks(view, Table)
    return found


def pager(view: TabView) -> Pager:
    (found,) = blocks(view, Pager)
    return found


def facts(view: TabView) -> dict[str, Any]:
    (found,) = blocks(view, Facts)
    return dict(found.items)


def column(view: TabView, name: str) -> list[Any]:
    found = table(view)
    index = list(found.columns).index(name)
    return [row[index] for row in found.rows]


def count(cell: Any) -> int:
    """A count in a task's facts: a link to its jobs, or 0."""
    if isinstance(cell, Link):
        return int(cell.text.replace(",", ""))
    assert cell == 0
    return 0


def old_task(store: Store, number: int, created_at: float) -> str:
    task_id = f"{number:032x}"
    task = {"id": task_id, "name": f"old {number}", "job_class": "Old", "total": 2, "created_at": created_at}
    store.create_task(task, [{"job_id": f"old-{number}-{n}", "params": [n]} for n in range(2)])
    return task_id


@pytest.mark.usefixtures("tracking_db_url")
def test_the_list_shows_the_newest_tasks_first_a_page_at_a_time(config: kiq.Config, tracker: Tracker) -> None:
    now = time.time()
    older = [old_task(tracker.store, n, now - HOUR + n) for n in range(26)]  # older[25] is the newest of them
    real = tracker.create_task(Enroll, [[1], [2, "fail"], [3, "broken"]], name="real")
    assert work_off(config) == 3
    tracker.writer.flush()

    first = render(config)
    assert first.title == "Tasks"
    assert list(table(first).columns) == [
        "Task", "Name", "Job class", "Created", "Total", "Working", "Finished", "Failed", "Progress (%)"
    ]  # fmt: skip
    assert column(first, "Task") == [Link(task_id, task_id) for task_id in [real, *reversed(older[2:])]]
    assert pager(first) == Pager(1, True)
    summary = tracker.task(real, with_events=False)
    assert summary is not None
    newest = table(first).rows[0]
    assert newest[1:] == [
        "real", Enroll.kiq_name, When(summary["created_at"]), 3, 0, 1, 1, 66.6  # 2 of 3 done: 66.66% shown 66.6
    ]  # fmt: skip
    assert table(first).rows[1][1:5] == ["old 25", "Old", When(now - HOUR + 25), 2]

    second = render(config, page="2")
    assert column(second, "Task") == [Link(older[1], older[1]), Link(older[0], older[0])]
    assert pager(second) == Pager(2, False)
    third = render(config, page="3")
    assert table(third).rows == [] and pager(third) == Pager(3, False)
    assert render(config, page="nonsense") == first  # a malformed page is the first
    assert tracker.store.recent_tasks(24, 3) == [tracker.store.tasks([task_id])[task_id] for task_id in older[2::-1]]


@pytest.mark.usefixtures("tracking_db_url")
def test_the_list_filters_by_name_in_any_case_and_literally(tracker: Tracker, config: kiq.Config) -> None:
    store, now = tracker.store, time.time()
    names = ["Nightly import", "nightly EXPORT", "weekly 100%_done", "weekly 100xydone", "monthly"]
    for number, name in enumerate(names):
        store.create_task(
            {"id": f"{number:032x}", "name": name, "job_class": "J", "total": 0, "created_at": now + number}, []
        )

    def named(**query: str) -> list[str]:
        view = render(config, **query)
        return column(view, "Name")

    assert named(q="NIGHTLY") == ["nightly EXPORT", "Nightly import"]
    assert named(q="100%_") == ["weekly 100%_done"]  # % and _ are no wildcards
    assert named(q="  monthly ") == ["monthly"]
    assert named(q="") == list(reversed(names))
    assert named(q="nothing like it\x00\ud800") == []  # no name holds them: no match, and no failure
    view = render(config, q="nightly")
    assert blocks(view, Text) == [Text("Tasks whose name contains “nightly” (in any case).")]
    assert pager(view) == Pager(1, False)
    assert table(render(config, q="nightly", page="2")).rows == []


@pytest.mark.usefixtures("tracking_db_url")
def test_the_task_page_shows_the_counts_of_the_store_and_its_jobs_a_page_at_a_time(
    config: kiq.Config, tracker: Tracker
) -> None:
    modes = ["fail" if number % 7 == 0 else "broken" if number == 3 else "ok" for number in range(30)]
    task_id = tracker.create_task(Enroll, [[number, mode] for number, mode in enumerate(modes)], name="thirty")
    assert work_off(config) == 30
    tracker.message(tracker.store.task_events(task_id, 0, 1)[0]["job_id"], "noted")
    tracker.writer.flush()
    task = tracker.task(task_id)
    assert task is not None
    assert task["counts"] == {"enqueued": 1, "working": 0, "finished": 24, "failed": 5, "error": 0}

    view = render(config, task_id)
    assert view.title == "Task thirty"
    shown = facts(view)
    assert shown["Task"] == task_id and shown["Name"] == Link("thirty", "", {"q": "thirty"})
    assert (shown["Job class"], shown["Created"], shown["Total"]) == (
        Enroll.kiq_name,
        When(task["created_at"]),
        task["total"],
    )
    assert {status: count(shown[status.capitalize()]) for status in task["counts"]} == task["counts"]
    assert shown["Failed"] == Link("5", task_id, {"status": "failed"})
    assert (shown["Done"], shown["Progress (%)"], shown["Complete"]) == (task["done"], 96.6, task["complete"])
    assert "Push error" not in shown

    events = task["events"]  # in job order, as the pages are
    expected = [
        [
            Link(event["job_id"], f"{task_id}/{event['job_id']}"),
            event["status"],
            event["attempts"],
            json.dumps(event["params"]),
            event["last_error"],
            When(event["updated_at"]),
        ]
        for event in events
    ]
    assert list(table(view).columns) == ["Job", "Status", "Attempts", "Arguments", "Last error", "Updated"]
    assert table(view).rows == expected[:25] and pager(view) == Pager(1, True)
    second = render(config, task_id, page="2")
    assert table(second).rows == expected[25:] and pager(second) == Pager(2, False)

    failed = render(config, task_id, status="failed")
    assert table(failed).rows == [row for row in expected if row[1] == "failed"]
    assert [row[4] for row in table(failed).rows] == [f"product {n} is not sellable" for n in (0, 7, 14, 21, 28)]
    assert pager(failed) == Pager(1, False)
    assert table(render(config, task_id, status="working")).rows == []


@pytest.mark.usefixtures("tracking_db_url")
def test_a_job_page_shows_its_arguments_error_and_messages_in_full(config: kiq.Config, tracker: Tracker) -> None:
    task_id = tracker.create_task(Enroll, [[5, "fail"], [6]])
    work_off(config)
    tracker.writer.flush()
    task = tracker.task(task_id)
    assert task is not None
    event = task["events"][0]
    tracker.message(event["job_id"], "second look")
    tracker.writer.flush()

    view = render(config, f"{task_id}/{event['job_id']}")
    shown = facts(view)
    assert (shown["Job"], shown["Task"], shown["Status"], shown["Attempts"]) == (
        event["job_id"],
        Link(task_id, task_id),
        "failed",
        1,
    )
    assert blocks(view, Code) == [Code('[\n  5,\n  "fail"\n]'), Code("product 5 is not sellable")]
    messages = blocks(view, Table)[-1]
    assert [row[1] for row in messages.rows] == ["enrolling 5", "second look"]
    assert all(isinstance(row[0], When) and row[0].epoch for row in messages.rows)


@pytest.mark.usefixtures("tracking_db_url")
@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("f" * 32, {}),  # well formed, unknown
        ("F" * 32, {}),  # task ids are lower-case hex
        ("not-a-task", {}),
        ("../" + "f" * 30, {}),
        ("{task}/no-such-job", {}),
        ("{task}/not a jid", {}),
        ("{task}/{other_job}", {}),  # a job of another task
        ("{other}/", {}),
        ("{task}", {"status": "lost"}),
    ],
)
def test_unknown_or_malformed_ids_are_not_found(
    config: kiq.Config, tracker: Tracker, path: str, query: dict[str, str]
) -> None:
    task_id = tracker.create_task(Enroll, [[1]])
    other = tracker.create_task(Enroll, [[2]])
    other_job = tracker.store.task_events(other, 0, 1)[0]["job_id"]
    assert table(render(config, task_id)).rows  # the task itself is found
    with pytest.raises(LookupError):
        render(config, path.format(task=task_id, other=other, other_job=other_job), **query)


@pytest.mark.usefixtures("tracking_db_url")
def test_markup_nul_and_lone_surrogates_come_back_as_plain_text(config: kiq.Config, tracker: Tracker) -> None:
    """Names, arguments, errors and messages reach the tab as text, unescaped (the dashboard escapes), as the store
    keeps them: what the database cannot store (NUL, lone surrogates) is stored as U+FFFD, on SQLite as on
    PostgreSQL; JSON arguments keep them. Nothing here fails the render."""
    markup = "<script>alert(1)</script>"
    named = tracker.create_task(Enroll, [[f"{markup}\x00", "fail"]], name=f"{markup}\x00\ud800")
    work_off(config)
    with pytest.raises(kiq.JobArgumentError):  # its rows are committed before the push refuses the argument
        tracker.create_task(Enroll, [["lone \ud800"]], name="refused")
    refused = tracker.store.recent_tasks(0, 1)[0]["id"]
    job = tracker.store.task_events(named, 0, 1)[0]["job_id"]
    tracker.message(job, f"{markup} \ud800")
    tracker.writer.submit(Update(job, status="failed", version=99, last_error=f"{markup}\x00 \udce9"))
    tracker.writer.flush()

    listed = render(config)
    assert column(listed, "Name") == ["refused", f"{markup}\ufffd\ufffd"]
    assert tracker.store.tasks([named])[named]["name"] == f"{markup}\ufffd\ufffd"

    view = render(config, named)
    assert view.title == f"Task {markup}\ufffd\ufffd"
    assert facts(view)["Name"] == Link(f"{markup}\ufffd\ufffd", "", {"q": f"{markup}\ufffd\ufffd"})
    (row,) = table(view).rows
    assert row[3] == f'["{markup}\\u0000", "fail"]'  # JSON text: NUL as its escape
    assert row[4] == f"{markup}\ufffd \ufffd"
    assert table(render(config, q=f"{markup}\x00")).rows[0][1] == f"{markup}\ufffd\ufffd"  # as it was stored

    job_view = render(config, f"{named}/{job}")
    assert blocks(job_view, Code) == [Code(f'[\n  "{markup}\\u0000",\n  "fail"\n]'), Code(f"{markup}\ufffd \ufffd")]
    messages = [row[1] for row in blocks(job_view, Table)[-1].rows]
    assert messages == [f"enrolling {markup}\ufffd", f"{markup} \ufffd"]

    failed_push = render(config, refused)
    assert facts(failed_push)["Push error"].startswith("JobArgumentError: ")
    assert table(failed_push).rows[0][3] == '["lone \ud800"]'  # kept in the JSON: the text as it was given


def test_the_created_at_index_is_added_to_an_existing_database(tracking_db_url: str) -> None:
    store = Store(tracking_db_url)
    store.init_schema()
    assert INDEX in {index["name"] for index in inspect(store.engine).get_indexes("kiq_tracking_tasks")}
    old_task(store, 1, 1.0)
    with store.engine.begin() as conn:  # the tables as an older kiq made them
        conn.exec_driver_sql(f"DROP INDEX {INDEX}")
    store.engine.dispose()

    stores = [Store(tracking_db_url) for _ in range(4)]  # processes starting at once: each may try to add it
    start = threading.Barrier(len(stores))
    failures: list[BaseException] = []

    def init(store: Store) -> None:
        start.wait()
        try:
            store.init_schema()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=init, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    for again in [*stores, Store(tracking_db_url)]:  # and a later start: nothing to do
        again.init_schema()
        indexes = {index["name"]: index for index in inspect(again.engine).get_indexes("kiq_tracking_tasks")}
        assert indexes[INDEX]["column_names"] == ["created_at"]
        assert [task["id"] for task in again.recent_tasks(0, 5)] == [f"{1:032x}"]
        again.engine.dispose()


def test_a_database_that_is_away_raises_and_the_tab_recovers_with_it(
    config: kiq.Config, private_postgres: PrivatePostgres
) -> None:
    tracker = track(config, private_postgres.url)
    try:
        task_id = tracker.create_task(Enroll, [[1]], name="before")
        assert column(render(config), "Name") == ["before"]
        private_postgres.stop("immediate")
        for path in ("", task_id, f"{task_id}/x"):
            with pytest.raises(OperationalError):
                render(config, path)
        private_postgres.start()
        assert column(render(config), "Name") == ["before"]
        assert facts(render(config, task_id))["Total"] == 1
    finally:
        tracker.writer.close(5)
        tracker.store.engine.dispose()
