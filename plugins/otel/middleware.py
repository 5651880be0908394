"""The client and server middleware: a PRODUCER span per push (or per bulk push), a CONSUMER span per job.

The trace context travels as top-level keys of the job payload (``traceparent``, ``tracestate`` with the
default W3C propagator), where Ruby Sidekiq's OpenTelemetry instrumentation reads and writes it too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, SpanKind

import kiq

from .telemetry import (
    BATCH_MESSAGE_COUNT,
    ERROR_TYPE,
    JOB_CLASS,
    MESSAGE_ID,
    RETRY_COUNT,
    Attributes,
    Telemetry,
    mark_failed,
)

if TYPE_CHECKING:
    import redis

    from kiq.middleware import Wrapper

LINK_MODES = ("link", "child")


@dataclass
class _Batch:
    """The ``send`` span of a bulk push in progress (None when not tracing); each job's middleware counts
    into it."""

    span: trace.Span | None
    sent: int = 0
    links: list[trace.SpanContext] = field(default_factory=list)


_current_batch: ContextVar[_Batch | None] = ContextVar("kiq_otel_batch", default=None)


def creation_context(job: dict[str, Any], telemetry: Telemetry) -> trace.SpanContext | None:
    """The producer's span context carried by the payload, if it carries a valid one."""
    if telemetry.context_fields().isdisjoint(job):
        return None  # nothing upstream traced: skip parsing
    carried = trace.get_current_span(propagate.extract(job)).get_span_context()
    return carried if carried.is_valid else None


class ClientTracing(kiq.ClientMiddleware):
    """``send <queue>`` PRODUCER span; its context becomes the job's creation context.

    A payload that already carries a context (a retry or a scheduled job pushed again by the poller, or a
    context the caller set) keeps it, as the semconv asks; the span links to it instead.
    """

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry

    @property
    def active(self) -> bool:  # type: ignore[override]  # no SDK: nothing to record, and a push is worth ~30 µs
        return not self.telemetry.idle()

    def call(self, job_class: type[kiq.Job] | str, job: dict[str, Any], queue: str, redis: redis.Redis) -> Wrapper:
        telemetry = self.telemetry
        batch = _current_batch.get()
        if batch is not None:  # one span for the whole bulk push
            if batch.span is not None:
                carried = creation_context(job, telemetry)
                if carried is None:
                    propagate.inject(job, trace.set_span_in_context(batch.span))
                else:
                    batch.links.append(carried)
            if (yield) is not None:
                batch.sent += 1
            return
        shared, metric = telemetry.attributes("send", queue, self.config, redis)
        span = self._start(job, queue, shared) if telemetry.tracing() else None
        try:
            pushed = yield
        except Exception as exc:
            telemetry.sent_messages.add(1, {**metric, ERROR_TYPE: mark_failed(span, exc)})
            raise
        finally:
            if span is not None:
                span.end()
        if pushed is not None:  # None: a middleware inside dropped the job, nothing was sent
            telemetry.sent_messages.add(1, metric)

    def _start(self, job: dict[str, Any], queue: str, shared: Attributes) -> trace.Span:
        carried = creation_context(job, self.telemetry)
        span = self.telemetry.tracer.start_span(
            f"send {queue}",
            kind=SpanKind.PRODUCER,
            attributes={**shared, MESSAGE_ID: job["jid"], JOB_CLASS: job["class"]},
            links=None if carried is None else [Link(carried)],
        )
        if carried is None:
            propagate.inject(job, trace.set_span_in_context(span))
        return span


class ServerTracing(kiq.ServerMiddleware):
    """``process <queue>`` CONSUMER span around the job, current while it runs.

    Linked to the job's creation context (``otel_link_mode = "link"``, the semconv default), or its child
    (``"child"``): then the ambient context, if any, is linked instead of being the parent.
    """

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry

    def call(self, job_instance: kiq.Job, job: dict[str, Any], queue: str) -> Wrapper:
        telemetry = self.telemetry
        config = self.config
        shared, metric = telemetry.attributes("process", queue, config, config.redis)
        span = token = None
        if telemetry.tracing():
            span = self._start(job, queue, shared)
            token = context.attach(trace.set_span_in_context(span))
        started = time.perf_counter()
        try:
            yield
        except Exception as exc:
            failed = {**metric, ERROR_TYPE: mark_failed(span, exc)}
            telemetry.process_duration.record(time.perf_counter() - started, failed)
            raise
        else:
            telemetry.process_duration.record(time.perf_counter() - started, metric)
        finally:  # also after a BaseException (Shutdown: the job was requeued), which is neither a failure
            # nor a processing time to record
            if token is not None:
                context.detach(token)
            if span is not None:
                span.end()

    def _start(self, job: dict[str, Any], queue: str, shared: Attributes) -> trace.Span:
        carried = creation_context(job, self.telemetry)
        links = [] if carried is None else [Link(carried)]
        parent: context.Context | None = None  # the ambient context
        if carried is not None and self.config.get("otel_link_mode") == "child":
            ambient = trace.get_current_span().get_span_context()
            if ambient.is_valid:
                links.append(Link(ambient))
            parent = trace.set_span_in_context(trace.NonRecordingSpan(carried))
        # Sidekiq's retry_count is 0 after the first failure, so this attempt's retry number is one more
        retry_count = job.get("retry_count")
        attributes = {
            **shared,
            MESSAGE_ID: str(job.get("jid", "")),
            JOB_CLASS: str(job.get("class", "")),
            RETRY_COUNT: retry_count + 1 if isinstance(retry_count, int) else 0,
        }
        return self.telemetry.tracer.start_span(
            f"process {queue}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes, links=links
        )


@contextmanager
def batch_send(telemetry: Telemetry, config: kiq.Config, queue: str, count: int) -> Iterator[None]:
    """One ``send <queue>`` span around a whole bulk push (every job's middleware and the Redis writes)."""
    shared, metric = telemetry.attributes("send", queue, config, config.redis)
    span = None
    if telemetry.tracing():
        attributes = {**shared, BATCH_MESSAGE_COUNT: count}
        span = telemetry.tracer.start_span(f"send {queue}", kind=SpanKind.PRODUCER, attributes=attributes)
    batch = _Batch(span)
    token = _current_batch.set(batch)
    try:
        yield
    except Exception as exc:
        telemetry.sent_messages.add(count, {**metric, ERROR_TYPE: mark_failed(span, exc)})
        raise
    finally:
        _current_batch.reset(token)
        if span is not None:
            for carried in batch.links:  # jobs that kept their own creation context
                span.add_link(carried)
            span.end()
    if batch.sent:
        telemetry.sent_messages.add(batch.sent, metric)
