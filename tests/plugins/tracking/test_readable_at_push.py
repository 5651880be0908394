"""A job tracked on its own (``track: True``) is readable as ``enqueued`` from the moment its push returns: through
the Python API and the HTTP endpoint, single and bulk pushes, sync and asyncio clients, even with a batch writer that
flushes only once a second."""

from __future__ import annotations

import pytest

import kiq
from kiq.plugins.tracking import Tracker
from tests.contrib.test_tracking_http import client_for
from tests.jobs.tracking import TrackedAlone
from tests.support import run_async

POLLS = 100


@pytest.fixture
def slow_writer(tracker: Tracker) -> Tracker:
    """The writer's interval far above a push's duration: only a push that waits for its row can pass."""
    tracker.writer.interval = 1.0
    return tracker


def test_each_push_is_readable_at_once_over_the_python_api(config: kiq.Config, slow_writer: Tracker) -> None:
    setter = TrackedAlone.set(config=config)
    statuses = []
    for number in range(POLLS):
        jid = setter.perform_async(number)
        assert jid is not None
        event = slow_writer.event(jid)
        statuses.append(event and event["status"])
    assert statuses == ["enqueued"] * POLLS


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_each_push_is_readable_at_once_over_http(config: kiq.Config, slow_writer: Tracker, kind: str) -> None:
    get = client_for(kind, slow_writer)
    setter = TrackedAlone.set(config=config)
    answers = []
    for number in range(POLLS):
        answer = get(f"/jobs/{setter.perform_async(number)}")
        answers.append((answer.status_code, answer.json().get("status")))
    assert answers == [(200, "enqueued")] * POLLS


def test_a_bulk_push_and_an_asyncio_push_are_readable_at_once(config: kiq.Config, slow_writer: Tracker) -> None:
    jids = TrackedAlone.set(config=config).perform_bulk([[n] for n in range(POLLS)])

    async def push() -> str | None:
        return await TrackedAlone.set(config=config).aio.perform_async(POLLS)

    jids.append(run_async(config, push))
    events = [slow_writer.event(jid) for jid in jids if jid is not None]
    assert [event and event["status"] for event in events] == ["enqueued"] * (POLLS + 1)
