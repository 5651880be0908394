"""Jobs for the otel end-to-end tests. In a worker, the plugin's spans go to a Redis list the test reads
(``SPANS_KEY``): a small SDK exporter that writes each finished span as JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import kiq
import kiq.plugins.otel

SPANS_KEY = "otel-test:spans"
provider = TracerProvider()


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """What the tests compare, with ids as hex like in ``traceparent``."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "links": [f"{link.context.trace_id:032x}-{link.context.span_id:016x}" for link in span.links],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
    }


class RedisSpanExporter(SpanExporter):
    """Writes finished spans to ``SPANS_KEY`` on the worker's Redis."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        kiq.default_config().redis.rpush(SPANS_KEY, *(json.dumps(span_record(span)) for span in spans))
        return SpanExportResult.SUCCESS


@kiq.configure_server
def trace_to_redis(config: kiq.Config) -> None:
    provider.add_span_processor(SimpleSpanProcessor(RedisSpanExporter()))
    kiq.plugins.otel.instrument(config, tracer_provider=provider)


class TracedJob(kiq.Job):
    """Makes a span of its own, which must nest under the process span."""

    def perform(self, label: str) -> None:
        with provider.get_tracer("tests.jobs.otel").start_as_current_span(f"inside {label}"):
            pass


class FlakyJob(kiq.Job):
    """Fails its first attempt; its retry comes a second later."""

    kiq_options = {"retry": 2}

    def retry_in(self, count: int, exc: BaseException, job: dict[str, Any]) -> int:
        return 1

    def perform(self) -> None:
        if "retry_count" not in self.job:
            raise RuntimeError("first attempt fails")
