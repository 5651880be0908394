"""Tracking: tasks, every status transition, messages, since-cursor polling and many tasks at once, on SQLite
and on PostgreSQL (KIQ_TEST_DATABASE_URL). Jobs run in-process through the real Processor, JobRetry and Poller."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
import redis

import kiq
from kiq.plugins.tracking import Tracker, tracker_for
from kiq.plugins.tracking.writer import Update
from tests.jobs.tracking import AsyncEnroll, Enroll, TrackedAlone, TypedEnroll, Untracked
from tests.support import run_on_event_loop
from tests.tracking_support import retry_now, track, work_off

pytestmark = pytest.mark.usefixtures("tracking_db_url")


def statuses(task: dict[str, Any]) -> list[tuple[str, int]]:
    return [(event["status"], event["attempts"]) for event in task["events"]]


def test_create_task_commits_every_event_before_the_first_push(config: kiq.Config, tracker: Tracker) -> None:
    seen_at_push: list[str | None] = []

    class Observe(kiq.ClientMiddleware):  # inside the tracking middleware: runs just before each push
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: redis.Redis) -> Generator[None]:
            event = tracker.event(job["jid"])
            seen_at_push.append(event and event["status"])
            yield

    config.client_middleware.add(Observe)
    task_id = tracker.create_task(Enroll, [[n] for n in range(5)], name="enroll five")

    assert len(task_id) == 32 and int(task_id, 16) >= 0  # 128 random bits
    assert seen_at_push == ["enqueued"] * 5
    task = tracker.task(task_id)
    assert task is not None
    assert (task["name"], task["job_class"], task["total"]) == ("enroll five", Enroll.kiq_name, 5)
    assert task["counts"]["enqueued"] == 5 and task["done"] == 0 and task["progress"] == 0.0
    queued = [kiq.payload.loads(raw) for raw in config.redis.lrange("queue:default", 0, -1)]
    assert {job["jid"] for job in queued} == {event["job_id"] for event in task["events"]}
    assert {job["task_id"] for job in queued} == {task_id}
    assert [event["params"] for event in task["events"]] == [[n] for n in range(5)]


def test_every_status_transition_including_retry_and_death(config: kiq.Config, tracker: Tracker) -> None:
    during_perform: dict[str, str] = {}

    class Observe(kiq.ServerMiddleware):  # inside the tracking middleware: sees the status a poll would see
        def call(self, job_instance: Any, job: dict[str, Any], queue: str) -> Generator[None]:
            tracker.writer.flush()
            event = tracker.event(job["jid"])
            during_perform[job["args"][1]] = event["status"] if event else "missing"
            yield

    config.server_middleware.add(Observe)
    task_id = tracker.create_task(Enroll, [[1, "ok"], [2, "fail"], [3, "flaky"], [4, "broken"]])
    assert work_off(config) == 4
    tracker.writer.flush()
    assert during_perform == dict.fromkeys(["ok", "fail", "flaky", "broken"], "working")
    task = tracker.task(task_id)
    assert task is not None
    assert statuses(task) == [("finished", 1), ("failed", 1), ("enqueued", 1), ("enqueued", 1)]
    failed, flaky = task["events"][1], task["events"][2]
    assert failed["last_error"] == "product 2 is not sellable"
    assert flaky["last_error"] == "RuntimeError: flaky 3"
    assert config.redis.zcard("retry") == 2  # the business failure was not retried
    assert (task["done"], task["complete"]) == (2, False)

    assert retry_now(config) == 2
    assert work_off(config) == 2
    tracker.writer.flush()
    task = tracker.task(task_id)
    assert task is not None
    assert statuses(task) == [("finished", 1), ("failed", 1), ("finished", 2), ("error", 2)]
    assert task["events"][3]["last_error"] == "RuntimeError: broken 4"
    assert config.redis.zcard("dead") == 1 and config.redis.zcard("retry") == 0
    assert task["counts"] == {"enqueued": 0, "working": 0, "finished": 2, "failed": 1, "error": 1}
    assert (task["done"], task["progress"], task["complete"]) == (4, 1.0, True)


def test_jobs_append_progress_messages(config: kiq.Config, tracker: Tracker) -> None:
    task_id = tracker.create_task(Enroll, [[7], [8]])
    work_off(config)
    task = tracker.task(task_id)
    assert task is not None
    tracker.message(task["events"][0]["job_id"], "checked by hand")
    tracker.writer.flush()
    task = tracker.task(task_id)
    assert task is not None
    texts = [[message["text"] for message in event["messages"]] for event in task["events"]]
    assert texts == [["enrolling 7", "checked by hand"], ["enrolling 8"]]
    assert all(isinstance(message["at"], float) for message in task["events"][0]["messages"])


def test_events_since_a_cursor_returns_only_what_changed(config: kiq.Config, tracker: Tracker) -> None:
    task_id = tracker.create_task(Enroll, [[n] for n in range(4)])
    first = tracker.events_since(task_id, 0)
    assert first is not None and len(first["events"]) == 4 and not first["more"]
    cursor = first["cursor"]
    assert cursor == max(event["seq"] for event in first["events"])
    unchanged = tracker.events_since(task_id, cursor)
    assert unchanged == {"task_id": task_id, "events": [], "cursor": cursor, "more": False}

    tracker.message(first["events"][2]["job_id"], "only this one")
    tracker.writer.flush()
    changed = tracker.events_since(task_id, cursor)
    assert changed is not None
    assert [event["job_id"] for event in changed["events"]] == [first["events"][2]["job_id"]]
    assert changed["cursor"] > cursor

    page = tracker.events_since(task_id, 0, limit=3)
    assert page is not None and len(page["events"]) == 3 and page["more"]
    rest = tracker.events_since(task_id, page["cursor"], limit=3)
    assert rest is not None and len(rest["events"]) == 1 and not rest["more"]
    assert tracker.events_since("0" * 32, 0) is None


def test_many_tasks_at_once(config: kiq.Config, tracker: Tracker) -> None:
    small = tracker.create_task(Enroll, [[1]], name="small")
    large = tracker.create_task(Enroll, [[n] for n in range(3)], name="large")
    work_off(config)
    tracker.writer.flush()
    unknown = "f" * 32
    found = tracker.tasks([large, unknown, small])
    assert list(found) == [large, small]
    assert found[small]["counts"]["finished"] == 1 and found[small]["total"] == 1
    assert found[large]["counts"]["finished"] == 3 and found[large]["complete"]
    assert "events" not in found[large]


def test_classes_opt_in_and_others_are_not_tracked(config: kiq.Config, tracker: Tracker) -> None:
    jid = TrackedAlone.perform_async(5)
    untracked = Untracked.perform_async(6)
    assert jid is not None and untracked is not None
    tracker.writer.flush()
    event = tracker.event(jid)
    assert event is not None and (event["status"], event["task_id"]) == ("enqueued", None)
    work_off(config)
    tracker.writer.flush()
    event = tracker.event(jid)
    assert event is not None and event["status"] == "finished"
    assert [message["text"] for message in event["messages"]] == ["alone 5"]
    assert tracker.event(untracked) is None


def test_a_tracked_job_keeps_its_keyword_arguments_with_its_params(config: kiq.Config, tracker: Tracker) -> None:
    jid = TrackedAlone.perform_async(number=7)
    positional = TrackedAlone.perform_async(8)
    work_off(config)
    tracker.writer.flush()
    event = tracker.event(jid)
    assert event is not None and event["params"] == {"args": [], "kwargs": {"number": 7}}
    assert [message["text"] for message in event["messages"]] == ["alone 7"]
    assert positional is not None and (tracker.event(positional) or {}).get("params") == [8]  # as it always was


def test_a_task_of_calls_with_keyword_and_typed_arguments(config: kiq.Config, tracker: Tracker) -> None:
    product = UUID("8f14e45f-ceea-467a-9575-4bc0c8e5b1a2")
    with pytest.raises(kiq.JobArgumentError, match="argument 'price'"):
        tracker.create_task(TypedEnroll, [kiq.Call(product, price="not a number")])  # refused before any write
    task_id = tracker.create_task(
        TypedEnroll, [kiq.Call(product, price=Decimal("1.50")), kiq.Call(str(product), price=2)]
    )
    work_off(config)
    tracker.writer.flush()
    task = tracker.task(task_id)
    assert task is not None and task["total"] == 2
    assert [event["params"] for event in task["events"]] == [
        {"args": [str(product)], "kwargs": {"price": "1.50"}},
        {"args": [str(product)], "kwargs": {"price": 2}},
    ]
    assert sorted(event["messages"][0]["text"] for event in task["events"]) == [
        f"UUID {product} at Decimal 1.50",
        f"UUID {product} at Decimal 2",
    ]
    assert {event["status"] for event in task["events"]} == {"finished"}


def test_a_failed_push_is_recorded_on_the_task(tracking_db_url: str) -> None:
    unreachable = kiq.Config(redis_url="redis://127.0.0.1:9/0")
    tracker = track(unreachable, tracking_db_url)
    with pytest.raises(redis.ConnectionError):
        tracker.create_task(Enroll, [[1], [2]])
    tracker.writer.close(1)
    (summary,) = tracker.store.tasks(_all_task_ids(tracker)).values()
    assert "ConnectionError" in summary["push_error"]
    assert summary["counts"]["enqueued"] == 2


def test_jobs_dropped_by_a_client_middleware_leave_the_task(config: kiq.Config, tracker: Tracker) -> None:
    class DropEven(kiq.ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: redis.Redis) -> Generator[None]:
            if job["args"][0] % 2:
                yield

    config.client_middleware.add(DropEven)
    task_id = tracker.create_task(Enroll, [[n] for n in range(4)])
    task = tracker.task(task_id)
    assert task is not None
    assert task["total"] == 2 and [event["params"] for event in task["events"]] == [[1], [3]]
    assert config.redis.llen("queue:default") == 2


def test_status_writes_converge_whatever_their_order(tracker: Tracker) -> None:
    task_id = tracker.create_task(Enroll.set(queue="nowhere"), [[1]])
    task = tracker.task(task_id)
    assert task is not None
    jid = task["events"][0]["job_id"]

    def write(status: str, version: int, error: str | None = None) -> None:
        tracker.store.apply([Update(jid, task_id, "Enroll", [1], status, version, 1, error)])

    write("finished", 2 * 4 + 2)  # the retry's outcome arrives first...
    write("enqueued", 1 * 4 + 2, "RuntimeError: late")  # ...the first run's error after it
    write("working", 2 * 4 + 1)
    event = tracker.event(jid)
    assert event is not None and (event["status"], event["last_error"]) == ("finished", None)
    write("error", 2 * 4 + 3, "died")
    event = tracker.event(jid)
    assert event is not None and event["status"] == "error"


def test_pending_updates_merge_per_job() -> None:
    working = Update("j", "t", "Enroll", [1], "working", 5, 1, messages=[{"text": "a"}])
    old_error = Update("j", None, "", None, "enqueued", 2, None, "Boom", messages=[{"text": "b"}])
    working.absorb(old_error)
    assert (working.status, working.version, working.attempts, working.last_error) == ("working", 5, 1, None)
    assert working.messages == [{"text": "a"}, {"text": "b"}] and working.task_id == "t"
    messages_only = Update("k", messages=[{"text": "c"}])
    messages_only.absorb(Update("k", "t", "Enroll", [2], "working", 5, 1))
    assert (messages_only.status, messages_only.version, messages_only.task_id, messages_only.params) == (
        "working",
        5,
        "t",
        [2],
    )


def test_the_tracker_registers_the_plugin_on_its_config(config: kiq.Config, tracking_db_url: str) -> None:
    config.add_plugin(kiq.Config(plugins=["tracking"]).plugins.get_plugin("tracking"), "tracking")
    config.tracking_database_url = tracking_db_url
    assert type(tracker_for(config)) is Tracker
    assert [entry.__name__ for entry in config.client_middleware] == ["TrackingClientMiddleware"]
    assert [entry.__name__ for entry in config.server_middleware] == ["TrackingServerMiddleware"]


def _all_task_ids(tracker: Tracker) -> list[str]:
    from sqlalchemy import select

    from kiq.plugins.tracking.models import Task

    with tracker.store.connect() as conn:
        return list(conn.execute(select(Task.id)).scalars())


def test_a_task_failure_is_logged_as_a_failure_not_done(
    config: kiq.Config, tracker: Tracker, caplog: pytest.LogCaptureFixture
) -> None:
    task_id = tracker.create_task(Enroll, [[1, "fail"], [2, "ok"]])
    with caplog.at_level("INFO", logger="kiq"):
        assert work_off(config) == 2
    ends = [record.getMessage() for record in caplog.records if record.getMessage().startswith(("done", "fail"))]
    assert ends == ["fail: TaskFailure: product 1 is not sellable", "done"]
    tracker.writer.flush()
    task = tracker.task(task_id)
    assert task is not None and (task["counts"]["failed"], task["counts"]["finished"]) == (1, 1)
    assert config.redis.zcard("retry") == 0  # a business failure is not retried


def test_an_async_task_is_created_and_its_coroutines_tracked(config: kiq.Config, tracker: Tracker) -> None:
    async def create() -> str:
        try:
            return await tracker.aio.create_task(AsyncEnroll, [[1, "ok"], [2, "fail"], [3, "ok"]], name="async")
        finally:
            await kiq.AsyncClient(config).close()

    task_id = asyncio.run(create())
    task = tracker.task(task_id)
    assert task is not None and task["counts"]["enqueued"] == 3  # committed before the push
    payloads = list(reversed(config.redis.lrange("queue:default", 0, -1)))
    assert {kiq.payload.loads(raw)["task_id"] for raw in payloads} == {task_id}
    units = run_on_event_loop(config, payloads)
    tracker.writer.flush()
    assert all(unit.acked == 1 for unit in units)  # each acknowledged once its outcome was committed
    task = tracker.task(task_id)
    assert task is not None and (task["counts"]["finished"], task["counts"]["failed"]) == (2, 1)
    messages = {event["job_id"]: [m["text"] for m in event["messages"]] for event in task["events"]}
    assert sorted(text for texts in messages.values() for text in texts) == [f"enrolling {n}" for n in (1, 2, 3)]


class Perishable(kiq.Job):
    kiq_options = {"track": True, "expires_in": 0.05}

    def perform(self, number: int) -> None: ...


def test_a_job_dropped_unrun_is_recorded_failed_with_the_reason(config: kiq.Config, tracker: Tracker) -> None:
    """Dropped by a layer outside tracking's (the expiry plugin's, outermost) or inside it (any middleware that
    announces kiq_job_dropped): either way ``failed`` with the reason, never ``finished`` or ``enqueued`` forever."""

    class DropOdd(kiq.ServerMiddleware):  # inside tracking's layer
        def call(self, job_instance: Any, job: dict[str, Any], queue: str) -> Generator[None]:
            if job["args"][0] % 2:
                self.config.plugins.notify("kiq_job_dropped", job=job, reason="odd numbers are off", config=self.config)
                return
            yield

    config.add_plugin("expiry")
    config.server_middleware.add(DropOdd)
    expired = Perishable.set(config=config).perform_async(0)
    time.sleep(0.1)  # past its deadline
    fresh = [Perishable.set(config=config, expires_in=60).perform_async(n) for n in (1, 2)]
    assert work_off(config) == 3
    tracker.writer.flush()
    events = {jid: tracker.event(jid) for jid in [expired, *fresh]}
    outcomes = {jid: (event["status"], event["last_error"]) for jid, event in events.items() if event}
    assert outcomes[expired][0] == "failed" and outcomes[expired][1].startswith("dropped: expired")
    assert outcomes[fresh[0]] == ("failed", "dropped: odd numbers are off")
    assert outcomes[fresh[1]] == ("finished", None)
