"""Optional INTERNAL spans around a worker's own operations (``otel_internal_spans``): ``kiq poll`` for each
pass of the scheduled/retry poller and ``kiq heartbeat`` for each heartbeat.

Each is a new trace root (these operations serve no caller) and is current while it runs, so the ``send``
spans of the jobs a poll pass enqueues, and spans that ``kiq_heartbeat`` plugins make, nest under it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import context, trace
from opentelemetry.trace import SpanKind

import kiq

from .telemetry import CLIENT_ID, MESSAGING_SYSTEM, SYSTEM, Attributes, Telemetry, mark_failed


@contextmanager
def internal_span(telemetry: Telemetry, operation: str, config: kiq.Config) -> Iterator[None]:
    """A ``kiq <operation>`` INTERNAL root span, current while the operation runs."""
    attributes: Attributes = {MESSAGING_SYSTEM: SYSTEM}
    identity = config.identity  # the worker's process identity, set by the launcher
    if isinstance(identity, str):
        attributes[CLIENT_ID] = identity
    span = telemetry.tracer.start_span(
        f"kiq {operation}", context=context.Context(), kind=SpanKind.INTERNAL, attributes=attributes
    )
    token = context.attach(trace.set_span_in_context(span))
    try:
        yield
    except Exception as exc:
        mark_failed(span, exc)
        raise
    finally:
        context.detach(token)
        span.end()
