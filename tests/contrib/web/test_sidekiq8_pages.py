"""The dashboard over HTTP on what Sidekiq 8 writes (``tests/fixtures/sidekiq8/``): integer-millisecond payload
times shown as the right dates (and, through each ``<time data-epoch>``, the right relative times in the browser),
latency, processes with capsules; a time that is no time says so instead of failing the page."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable

import httpx

import kiq
from tests.sidekiq8_support import fixture, write_sidekiq8_data

from .http_support import Document, enqueue, entry_key, failed, parse


def utc(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def epochs(page: Document) -> list[float]:
    """The moments a page shows (the browser's script words each one in the reader's zone, and how long ago)."""
    return [float(str(attributes["data-epoch"])) for tag, attributes in page.tags if tag == "time"]


def facts(page: Document) -> dict[str, str]:
    return dict(zip(page.texts["dt"], page.texts["dd"], strict=True))


def test_sidekiq8_jobs_and_processes_show_the_right_times(
    e2e_config: kiq.Config, dashboard: Callable[..., str]
) -> None:
    write_sidekiq8_data(e2e_config.redis, time.time())
    first, dead = fixture("retry_first_failure"), fixture("dead")
    with httpx.Client(base_url=dashboard()) as client:
        page = parse(client.get(f"/retries/{entry_key(first['score'], first['payload']['jid'])}").text)
        shown = facts(page)
        assert shown["Created"] == utc(1764064800.123) and shown["Enqueued"] == utc(1764064800.125)
        assert shown["Failed"] == utc(1764064801.456) and shown["Retried"] == "–"
        assert {1764064819.456, 1764064800.123, 1764064800.125, 1764064801.456} <= set(epochs(page))

        page = parse(client.get(f"/dead/{entry_key(dead['score'], dead['payload']['jid'])}").text)
        shown = facts(page)
        assert shown["Failed"] == utc(1764064801.6) and shown["Retried"] == utc(1764072000.7)
        assert dead["backtrace"][0] in " ".join(page.texts["pre"])

        queue = client.get("/queues/default").raise_for_status().text
        assert 1764064800.125 in epochs(parse(queue))
        waited_days = int((time.time() - 1764064800.125) // 86_400)
        assert f"latency {waited_days} d " in queue  # not 20,000 days (ms read as seconds) nor 0

        busy = parse(client.get("/busy").raise_for_status().text)
        rows = {row[0].text: [cell.text for cell in row] for row in busy.tables["processes"]}
        old = rows[fixture("process_8_0_9")["identity"]]
        assert old[3] == utc(1764064500.5) and old[4] == "1 / 6" and old[7] == "critical, default, single"
        new = rows[fixture("process_8_1_7")["identity"]]
        assert new[4] == "0 / 3" and new[7] == "mailers, default"
        assert 1764064801.0 in epochs(busy)  # the running job's run_at: Time.now.to_i, seconds


def test_a_payload_time_that_is_no_time_is_named_on_the_jobs_page(
    e2e_config: kiq.Config, dashboard: Callable[..., str]
) -> None:
    entry = failed("odd", failed_at="yesterday", enqueued_at=True)
    e2e_config.redis.zadd("retry", {json.dumps(entry): 1_700_000_000})
    enqueue(e2e_config.redis, "default", entry)
    with httpx.Client(base_url=dashboard()) as client:
        queue = parse(client.get("/queues/default").raise_for_status().text)
        assert queue.column("jobs", 3) == ["not a time: True (Sidekiq writes float seconds or integer milliseconds)"]
        response = client.get(f"/retries/{entry_key(1_700_000_000, 'odd')}")
        assert response.status_code == 200
        shown = facts(parse(response.text))
    assert shown["Failed"].startswith("not a time: 'yesterday'")
    assert shown["Enqueued"].startswith("not a time: True")
    assert shown["Created"] == utc(entry["created_at"])
