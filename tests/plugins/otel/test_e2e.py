"""The otel plugin across a real worker (in this process): the producer's context travels through Redis in the
payload.

The worker runs tests/jobs/otel.py, whose spans land in a Redis list as JSON. That module's configure_server
callback instruments every worker started after its import: the ``worker_tracing`` fixture keeps it, and its
tracer provider, to the test's own worker, so the in-process workers of later tests run without it. Jobs are
pushed by wire name.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import kiq
import kiq.plugins.otel as otel
from tests.support import InProcessWorker, make_retries_due, wait_until

SPANS_KEY = "otel-test:spans"  # tests.jobs.otel.SPANS_KEY
JOBS = "tests.jobs.otel"


@pytest.fixture
def sent_spans(e2e_config: kiq.Config) -> Iterator[InMemorySpanExporter]:
    """The test process's own spans (the producer side)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.instrument(e2e_config, tracer_provider=provider)
    yield exporter
    provider.shutdown()


@pytest.fixture
def worker_tracing(
    monkeypatch: pytest.MonkeyPatch, server_callbacks: list[Callable[[kiq.Config], object]]
) -> Iterator[None]:
    """tests.jobs.otel's configure_server callback (spans to Redis) for this test's workers only, on a tracer
    provider of this test's (the module's one would gather a span processor per worker started)."""
    jobs = importlib.import_module(JOBS)  # its first import registers the callback in ``server_callbacks``
    if jobs.trace_to_redis not in server_callbacks:
        server_callbacks.append(jobs.trace_to_redis)
    provider = TracerProvider()
    monkeypatch.setattr(jobs, "provider", provider)
    yield
    provider.shutdown()


def worker_spans(config: kiq.Config, name: str, count: int) -> list[dict[str, Any]]:
    """Wait for ``count`` spans called ``name`` from the worker, in the order they ended."""

    def found() -> list[dict[str, Any]]:
        spans = [json.loads(raw) for raw in config.redis.lrange(SPANS_KEY, 0, -1)]
        named = [span for span in spans if span["name"] == name]
        return named if len(named) >= count else []

    return wait_until(found, timeout=30, message=f"{count} {name!r} span(s) from the worker")


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    context = span.get_span_context()
    assert context is not None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def test_the_process_span_in_the_worker_links_to_the_producer_by_default(
    e2e_config: kiq.Config,
    sent_spans: InMemorySpanExporter,
    worker_tracing: None,
    start_worker: Callable[..., InProcessWorker],
) -> None:
    jid = kiq.Client(e2e_config).push({"class": f"{JOBS}.TracedJob", "args": ["a"]})
    (send,) = sent_spans.get_finished_spans()
    trace_id, span_id = hex_ids(send)
    worker = start_worker("-r", JOBS, "-c", "2")
    (process,) = worker_spans(e2e_config, "process default", 1)
    (inner,) = worker_spans(e2e_config, "inside a", 1)
    assert process["kind"] == "CONSUMER"
    assert process["parent_id"] is None and process["trace_id"] != trace_id
    assert process["links"] == [f"{trace_id}-{span_id}"]
    attributes = process["attributes"]
    assert attributes["messaging.message.id"] == jid
    assert attributes["kiq.job.class"] == f"{JOBS}.TracedJob"
    # the worker's identity, as its first heartbeat registers it (which may come after the job on a loaded machine)
    wait_until(lambda: e2e_config.redis.sismember("processes", attributes["messaging.client.id"]), 10)
    assert (inner["trace_id"], inner["parent_id"]) == (process["trace_id"], process["span_id"])
    assert worker.stop() == 0


def test_in_child_mode_a_retried_jobs_attempts_are_spans_in_the_producers_trace(
    e2e_config: kiq.Config,
    sent_spans: InMemorySpanExporter,
    worker_tracing: None,
    start_worker: Callable[..., InProcessWorker],
) -> None:
    kiq.Client(e2e_config).push({"class": f"{JOBS}.FlakyJob", "args": []})
    (send,) = sent_spans.get_finished_spans()
    trace_id, span_id = hex_ids(send)
    worker = start_worker(
        "-r", JOBS, env={"KIQ_PLUGINS": "otel", "KIQ_OTEL_LINK_MODE": "child", "KIQ_POLL_INTERVAL": "0.2"}
    )

    def retry_made_due() -> bool:
        """The first attempt's retry runs now, not after Sidekiq's jitter of up to 9 s (unless it ran already)."""
        spans = [json.loads(raw) for raw in e2e_config.redis.lrange(SPANS_KEY, 0, -1)]
        ran = sum(span["name"] == "process default" for span in spans) >= 2
        return bool(make_retries_due(e2e_config.redis)) or ran

    wait_until(retry_made_due, 30, message="the first attempt's retry entry")
    first, second = worker_spans(e2e_config, "process default", 2)
    for attempt in (first, second):
        assert (attempt["trace_id"], attempt["parent_id"]) == (trace_id, span_id)
    assert first["status"] == "ERROR" and first["events"] == ["exception"]
    assert first["attributes"]["error.type"] == "RuntimeError"
    assert first["attributes"]["kiq.job.retry_count"] == 0
    assert second["status"] == "UNSET" and "error.type" not in second["attributes"]
    assert second["attributes"]["kiq.job.retry_count"] == 1
    # the poller pushed the retry through the client again: a send span that kept the payload's context
    (requeue,) = worker_spans(e2e_config, "send default", 1)
    assert requeue["links"] == [f"{trace_id}-{span_id}"]
    assert worker.stop() == 0
