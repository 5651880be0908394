"""The tracer, the metric instruments and the attribute names the otel plugin uses, one set per Config.

Names follow the OpenTelemetry messaging semantic conventions (the ``send``/``process`` generation, v1.28+).
Tracer, instruments and the per-queue attributes are made once, not per job, and when no SDK is installed
(the global tracer provider is the API's proxy or no-op one) nothing is started or measured at all: the plugin
costs a push or a job its middleware layer and a cached check.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Status, StatusCode

import kiq
import kiq.ext

if TYPE_CHECKING:
    import redis

SCOPE = "kiq.plugins.otel"

# semconv attribute names (strings, so only opentelemetry-api is needed)
MESSAGING_SYSTEM = "messaging.system"
OPERATION_NAME = "messaging.operation.name"
OPERATION_TYPE = "messaging.operation.type"
DESTINATION_NAME = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
CLIENT_ID = "messaging.client.id"
BATCH_MESSAGE_COUNT = "messaging.batch.message_count"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
# kiq's own namespace, as the semconv asks of system-specific attributes
JOB_CLASS = "kiq.job.class"
RETRY_COUNT = "kiq.job.retry_count"

# Not one of the semconv's well-known values (none fits): the convention is to use the system's own name.
SYSTEM = "kiq"

# the semconv's explicit bucket advice for messaging.process.duration, in seconds
PROCESS_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)

# what the API hands out while no SDK provider is set (or tracing / metrics are switched off)
_NOT_TRACING = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_NOT_MEASURING = (type(metrics.get_meter_provider()), metrics.NoOpMeterProvider)  # the API's proxy until one is set

Attributes = dict[str, Any]

# while no SDK provider is set globally, how long the answer stands before the plugin asks the API again: a
# provider set later is used within this time
RECHECK_SECONDS = 0.5


class Telemetry:
    """A tracer, the two instruments and cached attributes, from the providers given (None: the global ones)."""

    def __init__(self) -> None:
        self._attributes: dict[tuple[str, str, object, str | None], tuple[Attributes, Attributes]] = {}
        self._textmap: object = None
        self._fields: frozenset[str] = frozenset()
        self.use()

    def use(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._recorded = [False, False]  # tracing, measuring: what _recording found
        self._checked = [-RECHECK_SECONDS, -RECHECK_SECONDS]  # and when (monotonic)
        self._idle_until = -RECHECK_SECONDS  # idle() holds until then (monotonic)
        self.tracer = trace.get_tracer(SCOPE, kiq.__version__, tracer_provider)
        meter = self.meter = metrics.get_meter(SCOPE, kiq.__version__, meter_provider)
        self.sent_messages = meter.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Number of messages producer attempted to send to the broker",
        )
        self.process_duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Duration of processing operation",
            explicit_bucket_boundaries_advisory=PROCESS_DURATION_BUCKETS,
        )

    def tracing(self) -> bool:
        """Whether spans are made at all (an SDK tracer provider is given or set globally)."""
        return self._recording(0, self._tracer_provider, trace.get_tracer_provider, _NOT_TRACING)

    def measuring(self) -> bool:
        """Whether metrics are recorded at all (an SDK meter provider is given or set globally)."""
        return self._recording(1, self._meter_provider, metrics.get_meter_provider, _NOT_MEASURING)

    def idle(self) -> bool:
        """Neither tracing nor measuring (no SDK): the first question of every push, so a "yes" is kept as long as
        the answers it rests on are."""
        if time.monotonic() < self._idle_until:
            return True
        if self.tracing() or self.measuring():
            return False
        self._idle_until = min(self._checked) + RECHECK_SECONDS
        return True

    def _recording(self, kind: int, given: object, current: Callable[[], object], idle: tuple[type, ...]) -> bool:
        """Asked per job, as a global SDK provider may be set at any time. The API sets a global provider once and
        for all, and asking for it costs ~0.6 µs (an environment lookup), a fifth of what the plugin may add to a
        push: so a "yes" is kept, and a "no" for ``RECHECK_SECONDS``."""
        if self._recorded[kind]:
            return True
        now = time.monotonic()
        if now >= self._checked[kind] + RECHECK_SECONDS:
            self._recorded[kind] = not isinstance(given or current(), idle)
            self._checked[kind] = now
        return self._recorded[kind]

    def context_fields(self) -> frozenset[str]:
        """The payload keys the global propagator reads (``traceparent``, ``tracestate``, ``baggage``)."""
        textmap = propagate.get_global_textmap()
        if textmap is not self._textmap:  # replaced with propagate.set_global_textmap
            self._fields = frozenset(textmap.fields)
            self._textmap = textmap
        return self._fields

    def attributes(
        self, operation: str, queue: str, config: kiq.Config, connection: redis.Redis
    ) -> tuple[Attributes, Attributes]:
        """The span attributes every job of this queue shares, and the metrics' subset of them."""
        pool = getattr(connection, "connection_pool", connection)  # a cluster's client has a pool per node
        identity = config.identity  # a worker's process identity, set by the launcher
        key = (operation, queue, pool, identity)
        cached = self._attributes.get(key)
        if cached is None:
            span_attributes = _shared_attributes(operation, queue, _server(pool))
            metric_attributes = {name: value for name, value in span_attributes.items() if name != OPERATION_TYPE}
            if isinstance(identity, str):
                span_attributes[CLIENT_ID] = identity
            cached = self._attributes[key] = (span_attributes, metric_attributes)
        return cached


def _server(pool: Any) -> dict[str, Any]:
    """Where a client's commands go: its pool's connection options; for a cluster's client (many nodes, one pool
    each), the node it asks first."""
    if not hasattr(pool, "connection_kwargs"):
        node = pool.get_default_node()
        return {"host": node.host, "port": node.port}
    options: dict[str, Any] = pool.connection_kwargs
    return options


def _shared_attributes(operation: str, queue: str, server: dict[str, Any]) -> Attributes:
    attributes: Attributes = {
        MESSAGING_SYSTEM: SYSTEM,
        OPERATION_NAME: operation,
        OPERATION_TYPE: operation,
        DESTINATION_NAME: queue,
    }
    address = server.get("host") or server.get("path")  # a Unix socket's path is its address
    if address:
        attributes[SERVER_ADDRESS] = address
        if "host" in server and server.get("port"):
            attributes[SERVER_PORT] = server["port"]
    return attributes


def mark_failed(span: trace.Span | None, exc: Exception) -> str:
    """Record ``exc`` on the span the semconv way; return its ``error.type``."""
    kind = kiq.ext.error_class(exc)
    if span is not None and span.is_recording():
        span.record_exception(exc)
        span.set_attribute(ERROR_TYPE, kind)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
    return kind
