"""kiq.contrib.sentry against a real sentry_sdk sending to a local HTTP endpoint that records the envelopes: one
event per failed attempt (or only at death) naming the job's class, queue and jid, none for a success, the pushing
process's trace continued in the worker, arguments scrubbed by the SDK's rules, breadcrumbs for pushes and runs."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

sentry_sdk = pytest.importorskip("sentry_sdk")

import kiq  # noqa: E402
from kiq.contrib.sentry import KiqIntegration, SentryPlugin  # noqa: E402
from tests.jobs.sentry import Charge, Receipt, async_charge  # noqa: E402
from tests.support import run_on_event_loop  # noqa: E402
from tests.tracking_support import retry_now, work_off  # noqa: E402


class Recorder(BaseHTTPRequestHandler):
    """Sentry's ingest endpoint, reduced to keeping every envelope item it is sent: ``(type, payload)``."""

    items: list[tuple[str, dict[str, Any]]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        lines = body.split(b"\n")
        index = 1  # after the envelope's header
        while index + 1 < len(lines):
            header = json.loads(lines[index])
            self.items.append((header["type"], json.loads(lines[index + 1])))
            index += 2
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Sentry:
    def __init__(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        self.items = items

    def of(self, kind: str) -> list[dict[str, Any]]:
        sentry_sdk.flush(timeout=10)
        return [payload for found, payload in self.items if found == kind]


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """A DSN for a local recorder of envelopes, and the items it recorded."""
    items: list[tuple[str, dict[str, Any]]] = []
    handler = type("Handler", (Recorder,), {"items": items})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://public@127.0.0.1:{server.server_address[1]}/1", items
    finally:
        server.shutdown()
        server.server_close()


def start(config: kiq.Config, endpoint: Any, **options: Any) -> Sentry:
    dsn, items = endpoint
    sentry_sdk.init(
        dsn=dsn,
        integrations=[KiqIntegration(**options)],
        traces_sample_rate=1.0,
        event_scrubber=sentry_sdk.scrubber.EventScrubber(recursive=True),
        default_integrations=False,  # no patches of logging, threads, ... left in this test process
    )
    config.add_plugin(SentryPlugin)  # what KiqIntegration.setup_once does, on the config of the process then
    return Sentry(items)


@pytest.fixture(autouse=True)
def closed(server_callbacks: list[Callable[[kiq.Config], object]]) -> Iterator[None]:
    # KiqIntegration.setup_once registers the plugin for every worker this process starts later (configure_server):
    # kept to this test (server_callbacks)
    with sentry_sdk.isolation_scope():  # this test's breadcrumbs are its own, not those of the tests before
        yield
    sentry_sdk.get_client().close()  # inactive again: the plugin then does nothing in the tests that follow


def test_one_event_per_failed_attempt_naming_class_queue_and_jid_and_the_trace_continued(
    config: kiq.Config, endpoint: Any
) -> None:
    sentry = start(config, endpoint)
    with sentry_sdk.start_transaction(name="POST /checkout", op="http.server") as pushing:
        jid = Charge.perform_async(7, password="hunter2")
        Receipt.perform_async(8)
        sentry_sdk.capture_message("pushed")  # its breadcrumbs show the pushes
    assert work_off(config, "billing") == 2  # the failed first attempt and the success
    assert retry_now(config) == 1
    assert work_off(config, "billing") == 1  # the second attempt: it dies
    pushed, *events = sentry.of("event")
    assert [c["message"] for c in pushed["breadcrumbs"]["values"] if c["category"] == "kiq"] == [
        "pushed SentryCharge to billing",
        "pushed SentryReceipt to billing",
    ]
    assert len(events) == 2, [event.get("tags") for event in events]  # one per failed attempt, none for the success
    for event, retry_count in zip(events, ["none", "0"], strict=True):
        assert event["tags"]["kiq.class"] == "SentryCharge"
        assert event["tags"]["kiq.queue"] == "billing"
        assert event["tags"]["kiq.jid"] == jid
        assert event["tags"]["kiq.retry_count"] == retry_count
        assert event["contexts"]["kiq"]["jid"] == jid
        assert event["exception"]["values"][-1]["value"] == "card declined for order 7"
        assert event["exception"]["values"][-1]["mechanism"] == {"type": "kiq", "handled": False}
        assert event["contexts"]["trace"]["trace_id"] == pushing.trace_id  # continued from the push
        assert event["extra"]["kiq-job"]["args"] == [7]
        assert event["extra"]["kiq-job"]["kwargs"]["password"] == "[Filtered]"  # the SDK's scrubber
        crumbs = [crumb["message"] for crumb in event["breadcrumbs"]["values"] if crumb["category"] == "kiq"]
        assert crumbs == [f"run SentryCharge {jid}"]
    runs = [t for t in sentry.of("transaction") if t["contexts"]["trace"]["op"] == "queue.process"]
    assert len(runs) == 3 and {t["contexts"]["trace"]["trace_id"] for t in runs} == {pushing.trace_id}
    assert sorted(t["contexts"]["trace"].get("status") for t in runs) == ["internal_error", "internal_error", "ok"]


def test_only_the_death_is_reported_when_asked(config: kiq.Config, endpoint: Any) -> None:
    sentry = start(config, endpoint, report_only_dead_jobs=True)
    with sentry_sdk.start_transaction(name="POST /checkout") as pushing:
        jid = Charge.perform_async(9)
    work_off(config, "billing")
    retry_now(config)
    work_off(config, "billing")
    (event,) = sentry.of("event")
    assert event["tags"]["kiq.jid"] == jid and event["tags"]["kiq.class"] == "SentryCharge"
    assert event["tags"]["kiq.retry_count"] == "1"  # its second failure, recorded as it died
    assert event["contexts"]["trace"]["trace_id"] == pushing.trace_id


def test_an_async_jobs_failure_is_one_event_in_the_pushing_trace(config: kiq.Config, endpoint: Any) -> None:
    sentry = start(config, endpoint)
    with sentry_sdk.start_transaction(name="POST /checkout") as pushing:
        jid = async_charge.perform_async(5)
    (unit,) = run_on_event_loop(config, [config.redis.rpop("queue:billing")])
    assert unit.acked == 1
    (event,) = sentry.of("event")
    assert event["tags"]["kiq.jid"] == jid and event["tags"]["kiq.class"] == "SentryAsyncCharge"
    assert event["contexts"]["trace"]["trace_id"] == pushing.trace_id


def test_nothing_is_sent_or_added_without_an_initialised_sdk(config: kiq.Config) -> None:
    config.add_plugin(SentryPlugin)
    jid = Receipt.perform_async(1)
    assert "trace_propagation_headers" not in json.loads(config.redis.lindex("queue:billing", 0))
    assert jid is not None and work_off(config, "billing") == 1


def test_sentry_sdk_init_registers_the_plugin_in_the_process_config() -> None:
    probe = (
        "import sentry_sdk, kiq\n"
        "from kiq.contrib.sentry import KiqIntegration, SentryPlugin\n"
        "sentry_sdk.init(dsn='http://k@127.0.0.1:9/1', integrations=[KiqIntegration()], default_integrations=False,\n"
        "                shutdown_timeout=0)\n"
        "print(kiq.default_config().plugins.find(SentryPlugin) is not None)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "True"
