"""The tracking plugin's dashboard tab, "Tasks" (``kiq.contrib.web``; see ``kiq.tabs``).

    (first page)          the newest tasks, newest first, 25 a page; ``?q=`` keeps those whose name contains it
    <task_id>             a task: its counts per status and progress, and its jobs in job order, 25 a page
                          (``?status=failed``: only the jobs of one status)
    <task_id>/<jid>       one job of it: arguments, last error, result and progress messages in full

An unknown or malformed id answers 404 (``LookupError``); a database that cannot be reached raises, and the dashboard
shows the error in the tab. Every string is handed over as it is stored: the dashboard escapes it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kiq.tabs import Cell, Code, Facts, Heading, Link, Pager, Search, Tab, Table, TabRequest, TabView, Text, When

from .statuses import DONE_STATUSES, FINISHED, STATUSES

if TYPE_CHECKING:
    from .store import Store

PAGE_SIZE = 25
TASK_ID = re.compile(r"[0-9a-f]{32}")  # what Tracker.create_task makes: 128 random bits, hex
JOB_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
SHORT = 200  # characters of arguments and errors in a table; a job's page shows them in full
TASK_COLUMNS = ["Task", "Name", "Job class", "Created", "Total", "Working", "Finished", "Failed", "Progress (%)"]
EVENT_COLUMNS = ["Job", "Status", "Attempts", "Arguments", "Last error", "Updated"]


def tasks_tab(store: Callable[[], Store]) -> Tab:
    """The "tasks" tab on the database ``store()`` gives (the config's Tracker's, made on the first request)."""
    return Tab("tasks", "Tasks", lambda request: render(store(), request))


def render(store: Store, request: TabRequest) -> TabView:
    if not request.path:
        return task_list(store, request)
    task_id, slash, jid = request.path.partition("/")
    if not TASK_ID.fullmatch(task_id):
        raise LookupError(f"not a task id: {task_id!r:.80}")
    if not slash:
        return task_page(store, request, task_id)
    if not JOB_ID.fullmatch(jid):
        raise LookupError(f"not a job id: {jid!r:.80}")
    return job_page(store, task_id, jid)


def task_list(store: Store, request: TabRequest) -> TabView:
    page, name = request.page, request.query.get("q", "").strip()
    found = store.recent_tasks((page - 1) * PAGE_SIZE, PAGE_SIZE + 1, name or None)
    rows: list[list[Cell]] = []
    for task in found[:PAGE_SIZE]:
        counts = task["counts"]
        failed = sum(counts[status] for status in DONE_STATUSES if status != FINISHED)
        rows.append(
            [
                Link(task["id"], task["id"]),
                task["name"],
                task["job_class"],
                When(task["created_at"]),
                task["total"],
                counts["working"],
                counts["finished"],
                failed,
                percent(task["progress"]),
            ]
        )
    blocks: list[Any] = [Search("q", "task name")]
    if name:
        blocks.append(Text(f"Tasks whose name contains “{name}” (in any case)."))
    empty = "No task has a name like that." if name else "No tasks yet."
    blocks += [Table(TASK_COLUMNS, rows, empty=empty), Pager(page, len(found) > PAGE_SIZE)]
    return TabView("Tasks", blocks)


def task_page(store: Store, request: TabRequest, task_id: str) -> TabView:
    task = store.task(task_id, with_events=False)
    if task is None:
        raise LookupError(f"no task {task_id}")
    status = request.query.get("status") or None
    if status is not None and status not in STATUSES:
        raise LookupError(f"no status {status!r:.40} (one of {', '.join(STATUSES)})")
    page = request.page
    events = store.task_events(task_id, (page - 1) * PAGE_SIZE, PAGE_SIZE + 1, status)
    facts: list[tuple[str, Cell]] = [
        ("Task", task_id),
        ("Name", Link(task["name"], "", {"q": task["name"]})),  # the tasks of that name
        ("Job class", task["job_class"]),
        ("Created", When(task["created_at"])),
        ("Total", task["total"]),
    ]
    for name, count in task["counts"].items():  # each count links to its jobs
        facts.append((name.capitalize(), Link(f"{count:,}", task_id, {"status": name}) if count else 0))
    facts += [("Done", task["done"]), ("Progress (%)", percent(task["progress"])), ("Complete", task["complete"])]
    if task["push_error"]:
        facts.append(("Push error", task["push_error"]))
    rows: list[list[Cell]] = [
        [
            Link(event["job_id"], f"{task_id}/{event['job_id']}"),
            event["status"],
            event["attempts"],
            short(as_json(event["params"])),
            None if event["last_error"] is None else short(event["last_error"]),
            When(event["updated_at"]),
        ]
        for event in events[:PAGE_SIZE]
    ]
    blocks: list[Any] = [Facts(facts), Heading(f"Jobs ({status})" if status else "Jobs")]
    if status is not None:
        blocks.append(Text(f"Only the jobs whose status is {status}."))
    blocks += [Table(EVENT_COLUMNS, rows, empty="No jobs."), Pager(page, len(events) > PAGE_SIZE)]
    return TabView(f"Task {task['name']}", blocks)


def job_page(store: Store, task_id: str, jid: str) -> TabView:
    event = store.event(jid)
    if event is None or event["task_id"] != task_id:
        raise LookupError(f"no job {jid} in task {task_id}")
    facts: list[tuple[str, Cell]] = [
        ("Job", jid),
        ("Task", Link(task_id, task_id)),
        ("Status", event["status"]),
        ("Attempts", event["attempts"]),
        ("Created", When(event["created_at"])),
        ("Updated", When(event["updated_at"])),
    ]
    blocks: list[Any] = [Facts(facts), Heading("Arguments"), Code(as_json(event["params"], indent=2))]
    if event["last_error"] is not None:
        blocks += [Heading("Last error"), Code(event["last_error"])]
    if event["result"] is not None:
        blocks += [Heading("Result"), Code(as_json(event["result"], indent=2))]
    messages = [message if isinstance(message, dict) else {"text": message} for message in event["messages"] or []]
    rows: list[list[Cell]] = [[When(moment(message.get("at"))), text(message.get("text"))] for message in messages]
    blocks += [Heading("Messages"), Table(["At", "Message"], rows, empty="No messages.")]
    return TabView(f"Job {jid}", blocks)


def percent(fraction: float) -> float:
    """A fraction as a percentage, rounded down to a tenth: 99.99% done is not shown as 100."""
    return math.floor(fraction * 1000) / 10


def as_json(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent, default=repr)


def short(value: str) -> str:
    return value if len(value) <= SHORT else value[: SHORT - 1] + "…"


def text(value: Any) -> str:
    return value if isinstance(value, str) else as_json(value)


def moment(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
