"""Reading batches: ``kiq batches`` (a table or JSON, one batch in full) and ``GET /batches/<bid>`` from the
tracking HTTP endpoints, with the ``authorize`` hook asked first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import kiq
from kiq.cli import main
from kiq.contrib.tracking_http import Resource, wsgi_app
from kiq.plugins.batch import Batch
from kiq.plugins.tracking import Tracker
from tests.jobs.batch import Callback, Noop

from .conftest import drain


@pytest.fixture
def tracking_db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tracking.db'}"  # batches live in Redis: one database kind is enough


def test_kiq_batches_lists_the_newest_and_shows_one(config: kiq.Config, capsys: pytest.CaptureFixture[str]) -> None:
    assert config.redis_url is not None
    url = ["--redis-url", config.redis_url]
    with Batch("first caf\udce9", on_success=Callback) as first:
        Noop.perform_async()
    drain(config)
    with Batch("second", on_complete=Callback) as second, Batch("its child") as child:
        Noop.set(queue="elsewhere").perform_async()
    assert main(["batches", *url]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split() == ["BID", "STATE", "TOTAL", "PENDING", "FAILURES", "DEAD", "CREATED", "DESCRIPTION"]
    rows = {line.split()[0]: line for line in lines}
    assert list(rows) == [child.bid, second.bid, first.bid]  # newest first
    assert rows[first.bid].split()[1:6] == ["success", "1", "0", "0", "0"]
    assert rows[child.bid].split()[1:6] == ["running", "1", "1", "0", "0"]
    assert rows[first.bid].endswith("first caf\\udce9")  # printable, not a crash

    assert main(["batches", second.bid, *url]) == 0
    shown = capsys.readouterr().out
    assert "running" in shown and "on complete" in shown and "child " in shown
    assert main(["batches", second.bid, "--json", *url]) == 0
    details = json.loads(capsys.readouterr().out)
    assert (details["bid"], details["complete"], details["callbacks"]) == (
        second.bid,
        False,
        {"complete": "BatchCallback"},
    )
    assert main(["batches", "--json", *url]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3

    assert main(["batches", "no-such-batch", *url]) == 1
    assert main(["batches", "not a bid", *url]) == 2
    assert "not a batch id" in capsys.readouterr().out


def test_get_batches_answers_the_status_after_the_authorize_hook(config: kiq.Config, tracker: Tracker) -> None:
    with Batch("over http", on_success=Callback) as batch:
        Noop.perform_async()
    drain(config)
    asked: list[Resource] = []

    def authorize(request: Any, resource: Resource) -> bool:
        asked.append(resource)
        return resource.id == batch.bid

    for hook in (None, authorize):
        http = httpx.Client(transport=httpx.WSGITransport(app=wsgi_app(tracker, hook)), base_url="http://t")
        answer = http.get(f"/batches/{batch.bid}")
        assert answer.status_code == 200
        body = answer.json()
        assert (body["description"], body["total"], body["success"], body["complete"]) == ("over http", 1, True, True)
    assert asked == [Resource("batch", batch.bid, None)]
    assert http.get("/batches/unknown-batch").status_code == 403
    open_http = httpx.Client(transport=httpx.WSGITransport(app=wsgi_app(tracker)), base_url="http://t")
    assert open_http.get("/batches/unknown-batch").status_code == 404
    assert open_http.get("/batches/not%20a%20bid").status_code == 400
