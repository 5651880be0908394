"""The otel plugin in one process: spans, context in the payload, links/parents, errors and metrics, read back
with the SDK's in-memory exporters (passed in as providers, never the global ones)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import redis
import redis.exceptions as redis_errors
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import kiq
import kiq.plugins.otel as otel
from kiq.errors import Shutdown
from kiq.payload import dumps, loads
from kiq.server.launcher import Launcher
from kiq.server.scheduled import Poller
from tests.support import run_on_event_loop


class Greet(kiq.Job):
    def perform(self, name: str) -> None:
        pass


class Halt(kiq.ClientMiddleware):
    """Drops every job (a client middleware that does not yield)."""

    def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Any:
        return
        yield


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer: trace.Tracer

    def finished(self, name: str | None = None) -> list[ReadableSpan]:
        return [span for span in self.spans.get_finished_spans() if name is None or span.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.finished(name)
        return span

    def points(self, metric_name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        if data is None:  # nothing was recorded at all
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == metric_name
            for point in metric.data.data_points
        ]


@pytest.fixture
def telemetry(config: kiq.Config) -> Iterator[Telemetry]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    otel.instrument(config, tracer_provider=tracer_provider, meter_provider=meter_provider)
    yield Telemetry(spans, reader, tracer_provider.get_tracer("test"))
    tracer_provider.shutdown()
    meter_provider.shutdown()


def traceparent_of(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def ids(context: trace.SpanContext | None) -> tuple[int, int]:
    """What identifies a span (a context read back from a payload differs only in being remote)."""
    assert context is not None
    return context.trace_id, context.span_id


def linked(span: ReadableSpan) -> list[tuple[int, int]]:
    return [ids(link.context) for link in span.links]


def queued(r: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [loads(raw) for raw in reversed(r.lrange(f"queue:{queue}", 0, -1))]


def process(config: kiq.Config, job: dict[str, Any], work: Callable[[], Any] = lambda: None) -> Any:
    """Run ``work`` inside the server chain, as the processor does for ``perform``."""
    instance = kiq.registry.get(job["class"])()
    instance.jid, instance.job = job["jid"], job
    return config.server_middleware.invoke((instance, job, job["queue"]), work)


# -- enabling -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["setting", "register", "instrument"])
def test_the_plugin_is_enabled_each_documented_way(redis_url: str, how: str) -> None:
    if how == "setting":
        config = kiq.Config(redis_url=redis_url, plugins=["otel"], otel_link_mode="child")
    else:
        config = kiq.Config(redis_url=redis_url)
        config.add_plugin("otel") if how == "register" else otel.instrument(config)
        config.otel_link_mode = "child"  # the plugin's setting is declared either way
    assert otel.ClientTracing in config.client_middleware
    assert otel.ServerTracing in config.server_middleware
    assert config.get("otel_link_mode") == "child"
    with pytest.raises(kiq.ConfigError, match="otel_link_mode"):
        config.otel_link_mode = "sibling"


# -- client -------------------------------------------------------------------------------------------------
def test_push_makes_a_producer_span_whose_context_travels_in_the_payload(
    config: kiq.Config, r: redis.Redis, telemetry: Telemetry
) -> None:
    jid = Greet.set(queue="mail").perform_async("ada")
    span = telemetry.one("send mail")
    assert span.kind is SpanKind.PRODUCER
    assert span.parent is None
    attributes = dict(span.attributes or {})
    assert attributes.pop("server.address")  # the embedded Redis' socket, or the server's host
    attributes.pop("server.port", None)
    assert attributes == {
        "messaging.system": "kiq",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": "mail",
        "messaging.message.id": jid,
        "kiq.job.class": Greet.kiq_name,
    }
    (payload,) = queued(r, "mail")
    assert payload["traceparent"] == traceparent_of(span)


def test_push_inside_a_span_is_its_child(config: kiq.Config, telemetry: Telemetry) -> None:
    with telemetry.tracer.start_as_current_span("request") as request:
        Greet.perform_async("ada")
    send = telemetry.one("send default")
    assert ids(send.parent) == ids(request.get_span_context())


def test_a_payload_with_its_own_context_keeps_it_and_the_span_links_to_it(
    config: kiq.Config, r: redis.Redis, telemetry: Telemetry
) -> None:
    with telemetry.tracer.start_as_current_span("elsewhere") as elsewhere:
        pass
    own = traceparent_of(elsewhere)  # type: ignore[arg-type]
    kiq.Client(config).push({"class": Greet, "args": ["ada"], "traceparent": own})
    (payload,) = queued(r)
    assert payload["traceparent"] == own
    assert linked(telemetry.one("send default")) == [ids(elsewhere.get_span_context())]


def test_a_scheduled_job_keeps_the_producers_context_when_the_poller_enqueues_it(
    config: kiq.Config, r: redis.Redis, telemetry: Telemetry
) -> None:
    Greet.perform_in(60, "ada")
    (scheduled_send,) = telemetry.finished("send default")
    assert Poller(config).enqueue_jobs(now=time.time() + 120) == 1
    (payload,) = queued(r)
    assert payload["traceparent"] == traceparent_of(scheduled_send)
    _, enqueue_send = telemetry.finished("send default")
    assert linked(enqueue_send) == [ids(scheduled_send.get_span_context())]


def test_a_dropped_job_is_not_counted_as_sent(config: kiq.Config, telemetry: Telemetry) -> None:
    config.client_middleware.add(Halt)  # inside the otel middleware
    assert Greet.perform_async("ada") is None
    assert telemetry.one("send default").status.status_code is StatusCode.UNSET
    assert telemetry.points("messaging.client.sent.messages") == []


def test_a_refused_push_is_an_error_span_and_counted_with_its_error_type(
    config: kiq.Config, telemetry: Telemetry
) -> None:
    with pytest.raises(kiq.JobArgumentError):
        Greet.perform_async(("a", "tuple"))
    span = telemetry.one("send default")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None and span.attributes["error.type"] == "kiq.errors.JobArgumentError"
    (point,) = telemetry.points("messaging.client.sent.messages")
    assert point.value == 1 and point.attributes["error.type"] == "kiq.errors.JobArgumentError"


def test_a_bulk_push_is_one_send_span_with_the_message_count(
    config: kiq.Config, r: redis.Redis, telemetry: Telemetry
) -> None:
    jids = Greet.perform_bulk([["a"], ["b"], ["c"]])
    span = telemetry.one("send default")
    assert span.kind is SpanKind.PRODUCER
    assert span.attributes is not None and span.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in span.attributes  # a per-message attribute, not for batches
    payloads = queued(r)
    assert [p["jid"] for p in payloads] == jids
    assert {p["traceparent"] for p in payloads} == {traceparent_of(span)}
    (point,) = telemetry.points("messaging.client.sent.messages")
    assert point.value == 3 and "error.type" not in point.attributes


def test_sent_messages_are_counted_per_queue(config: kiq.Config, telemetry: Telemetry) -> None:
    Greet.perform_async("a")
    Greet.perform_async("b")
    Greet.set(queue="mail").perform_async("c")
    counts = {
        point.attributes["messaging.destination.name"]: point.value
        for point in telemetry.points("messaging.client.sent.messages")
    }
    assert counts == {"default": 2, "mail": 1}
    (point, *_) = telemetry.points("messaging.client.sent.messages")
    assert point.attributes["messaging.system"] == "kiq"
    assert point.attributes["messaging.operation.name"] == "send"


# -- server -------------------------------------------------------------------------------------------------
def test_processing_is_a_consumer_span_linked_to_the_producer_and_current_while_the_job_runs(
    config: kiq.Config, r: redis.Redis, telemetry: Telemetry
) -> None:
    jid = Greet.perform_async("ada")
    send = telemetry.one("send default")
    (job,) = queued(r)

    def work() -> str:
        with telemetry.tracer.start_as_current_span("inside the job"):
            return "done"

    assert process(config, job, work) == "done"
    span = telemetry.one("process default")
    assert span.kind is SpanKind.CONSUMER
    assert span.parent is None  # link mode: a new trace, linked to the producer's
    assert linked(span) == [ids(send.get_span_context())]
    attributes = dict(span.attributes or {})
    assert attributes.pop("server.address")
    attributes.pop("server.port", None)
    assert attributes == {
        "messaging.system": "kiq",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": jid,
        "kiq.job.class": Greet.kiq_name,
        "kiq.job.retry_count": 0,
    }
    inner = telemetry.one("inside the job")
    assert inner.parent is not None and ids(inner.parent) == ids(span.get_span_context())
    assert span.status.status_code is StatusCode.UNSET


def test_child_mode_continues_the_producers_trace_and_links_the_ambient_span(
    config: kiq.Config, r: redis.Redis, telemetry: Telemetry
) -> None:
    config.otel_link_mode = "child"
    Greet.perform_async("ada")
    send = telemetry.one("send default")
    (job,) = queued(r)
    process(config, job)
    span = telemetry.one("process default")
    assert ids(span.parent) == ids(send.get_span_context())  # same trace, parent span
    assert linked(span) == [ids(send.get_span_context())]
    with telemetry.tracer.start_as_current_span("ambient") as ambient:
        process(config, job)
    _, nested = telemetry.finished("process default")
    assert ids(nested.parent) == ids(send.get_span_context())
    assert linked(nested) == [ids(send.get_span_context()), ids(ambient.get_span_context())]


def test_a_job_without_a_context_gets_a_root_span_without_links(config: kiq.Config, telemetry: Telemetry) -> None:
    config.otel_link_mode = "child"
    job = {"class": Greet.kiq_name, "args": ["ada"], "jid": "a" * 24, "queue": "default"}
    process(config, job)
    span = telemetry.one("process default")
    assert span.parent is None and list(span.links) == []


def test_a_failing_job_records_the_error_and_the_exception_propagates(
    config: kiq.Config, r: redis.Redis, telemetry: Telemetry
) -> None:
    Greet.perform_async("ada")
    (job,) = queued(r)

    def fail() -> None:
        raise ValueError("no such customer")

    with pytest.raises(ValueError, match="no such customer"):
        process(config, job, fail)
    span = telemetry.one("process default")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError: no such customer"
    assert span.attributes is not None and span.attributes["error.type"] == "ValueError"
    (event,) = span.events
    assert event.name == "exception" and event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"
    (point,) = telemetry.points("messaging.process.duration")
    assert point.count == 1 and point.attributes["error.type"] == "ValueError"


def test_a_shutdown_is_not_a_failure(config: kiq.Config, r: redis.Redis, telemetry: Telemetry) -> None:
    Greet.perform_async("ada")
    (job,) = queued(r)

    def interrupted() -> None:
        raise Shutdown()

    with pytest.raises(Shutdown):
        process(config, job, interrupted)
    span = telemetry.one("process default")
    assert span.status.status_code is StatusCode.UNSET and list(span.events) == []
    assert telemetry.points("messaging.process.duration") == []


def test_a_retry_counts_its_attempt_and_the_worker_identity_is_the_client_id(
    config: kiq.Config, r: redis.Redis, telemetry: Telemetry
) -> None:
    config.identity = "host:123:0123456789ab"
    Greet.perform_async("ada")
    (job,) = queued(r)
    process(config, {**job, "retry_count": 0})  # Sidekiq's count after the first failure
    attributes = telemetry.one("process default").attributes
    assert attributes is not None
    assert attributes["kiq.job.retry_count"] == 1
    assert attributes["messaging.client.id"] == "host:123:0123456789ab"


def test_process_duration_is_a_histogram_in_seconds_with_the_semconv_buckets(
    config: kiq.Config, r: redis.Redis, telemetry: Telemetry
) -> None:
    Greet.perform_async("ada")
    (job,) = queued(r)
    process(config, job, lambda: time.sleep(0.02))
    process(config, job)
    (point,) = telemetry.points("messaging.process.duration")
    assert isinstance(point, HistogramDataPoint)
    assert point.count == 2 and 0.02 <= point.max < 5
    assert list(point.explicit_bounds) == [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]
    assert dict(point.attributes) == {
        key: value
        for key, value in {
            "messaging.system": "kiq",
            "messaging.operation.name": "process",
            "messaging.destination.name": "default",
            "server.address": point.attributes["server.address"],
            "server.port": point.attributes.get("server.port"),
        }.items()
        if value is not None
    }
    (sent,) = telemetry.points("messaging.client.sent.messages")
    assert isinstance(sent, NumberDataPoint) and sent.value == 1


# -- internal spans (poller and heartbeat) -------------------------------------------------------------------
class RedisRefuses(kiq.ClientMiddleware):
    """Fails every push the way an unreachable Redis does (the poller then puts the job back and raises)."""

    def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Any:
        raise redis_errors.ConnectionError("Redis went away")
        yield


def poll_and_beat(config: kiq.Config, r: redis.Redis) -> Launcher:
    """One poller pass that enqueues a due scheduled job, and one heartbeat, as a worker runs them."""
    Greet.perform_in(60, "ada")
    assert Poller(config).enqueue_jobs(now=time.time() + 120) == 1
    launcher = Launcher(config)
    launcher.heartbeat.beat()
    assert r.sismember("processes", launcher.identity)  # the beat ran
    return launcher


def test_no_internal_spans_by_default(config: kiq.Config, r: redis.Redis, telemetry: Telemetry) -> None:
    assert config.get("otel_internal_spans") is False
    poll_and_beat(config, r)
    assert [span.name for span in telemetry.finished()] == ["send default", "send default"]


def test_internal_spans_are_roots_around_each_poll_pass_and_heartbeat(
    config: kiq.Config, r: redis.Redis, telemetry: Telemetry
) -> None:
    config.otel_internal_spans = "true"  # as from KIQ_OTEL_INTERNAL_SPANS
    with telemetry.tracer.start_as_current_span("ambient"):  # not their parent: they serve no caller
        launcher = poll_and_beat(config, r)
    poll, beat = telemetry.one("kiq poll"), telemetry.one("kiq heartbeat")
    assert poll.kind is SpanKind.INTERNAL and beat.kind is SpanKind.INTERNAL
    assert poll.parent is None and beat.parent is None
    assert dict(poll.attributes or {}) == {"messaging.system": "kiq"}
    assert dict(beat.attributes or {}) == {"messaging.system": "kiq", "messaging.client.id": launcher.identity}
    _, enqueue_send = telemetry.finished("send default")  # the pass's push nests under its span
    assert ids(enqueue_send.parent) == ids(poll.get_span_context())
    Poller(config).enqueue_jobs()
    launcher.heartbeat.beat()
    assert len(telemetry.finished("kiq poll")) == 2 and len(telemetry.finished("kiq heartbeat")) == 2


def test_a_failing_poll_pass_is_an_error_span(config: kiq.Config, r: redis.Redis, telemetry: Telemetry) -> None:
    config.otel_internal_spans = True
    Greet.perform_in(60, "ada")
    config.client_middleware.add(RedisRefuses)
    with pytest.raises(redis_errors.ConnectionError):
        Poller(config).enqueue_jobs(now=time.time() + 120)
    assert r.zcard("schedule") == 1  # put back
    poll = telemetry.one("kiq poll")
    assert poll.status.status_code is StatusCode.ERROR
    assert poll.attributes is not None
    assert poll.attributes["error.type"] == "redis.exceptions.ConnectionError"


# -- without an SDK -----------------------------------------------------------------------------------------
def test_without_a_tracing_provider_no_context_is_injected_but_metrics_are_kept(
    config: kiq.Config, r: redis.Redis
) -> None:
    reader = InMemoryMetricReader()
    otel.instrument(config, tracer_provider=trace.NoOpTracerProvider(), meter_provider=MeterProvider([reader]))
    Greet.perform_async("ada")
    (job,) = queued(r)
    assert "traceparent" not in job
    process(config, job)
    telemetry = Telemetry(InMemorySpanExporter(), reader, trace.NoOpTracer())
    (sent,) = telemetry.points("messaging.client.sent.messages")
    (duration,) = telemetry.points("messaging.process.duration")
    assert sent.value == 1 and duration.count == 1


def test_a_worker_without_any_sdk_provider_leaves_the_plugin_out_of_its_job_chain(config: kiq.Config) -> None:
    config.add_plugin("otel")
    assert otel.ServerTracing in config.server_middleware
    config.plugins.hook.kiq_startup(config=config)  # no provider given, none set globally: nothing to record
    assert otel.ServerTracing not in config.server_middleware
    assert otel.ClientTracing in config.client_middleware  # pushes keep their context for downstream consumers


@pytest.mark.parametrize("given", ["tracer_provider", "meter_provider"])
def test_a_worker_with_an_sdk_provider_keeps_the_plugin_in_its_job_chain(config: kiq.Config, given: str) -> None:
    provider = TracerProvider() if given == "tracer_provider" else MeterProvider()
    otel.instrument(config, **{given: provider})  # type: ignore[arg-type]
    config.plugins.hook.kiq_startup(config=config)
    assert otel.ServerTracing in config.server_middleware
    provider.shutdown()


class AsyncGreet(kiq.Job):
    """Records the span that is current inside its coroutine, across an await."""

    current: ClassVar[list[trace.SpanContext]] = []

    async def perform(self, name: str) -> None:
        await asyncio.sleep(0.01)
        AsyncGreet.current.append(trace.get_current_span().get_span_context())


def test_an_async_jobs_process_span_is_current_inside_its_coroutine(
    config: kiq.Config, r: redis.Redis, telemetry: Telemetry
) -> None:
    AsyncGreet.current.clear()
    AsyncGreet.perform_bulk([["ada"], ["grace"], ["edsger"]])
    run_on_event_loop(config, [dumps(job) for job in queued(r)])  # three coroutines awaiting on one loop at once
    spans = {ids(span.get_span_context()): span for span in telemetry.finished("process default")}
    assert len(spans) == 3 and {ids(context) for context in AsyncGreet.current} == set(spans)
    assert all(span.status.status_code is StatusCode.UNSET and span.end_time for span in spans.values())
