"""OpenTelemetry tracing and metrics for kiq jobs (needs only ``opentelemetry-api``; bring your own SDK).

Enable it like any plugin: ``plugins = ["otel"]`` (or ``KIQ_PLUGINS=otel``), ``config.add_plugin("otel")``, or
``kiq.plugins.otel.instrument(config, tracer_provider=..., meter_provider=...)`` to use providers other than the
global ones. See the README, "OpenTelemetry tracing and metrics".
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager

from opentelemetry import metrics, trace

import kiq
import kiq.ext

from .gauges import observe_fleet
from .internal import internal_span
from .middleware import LINK_MODES, ClientTracing, ServerTracing, batch_send
from .telemetry import Telemetry

log = logging.getLogger("kiq.otel")

__all__ = ["ClientTracing", "OtelPlugin", "ServerTracing", "instrument"]

SETTINGS = [
    kiq.ext.Setting.choice(
        "otel_link_mode",
        "link",
        LINK_MODES,
        "how a job's process span relates to its producer: link (semconv default) or child",
    ),
    kiq.ext.Setting.boolean(
        "otel_internal_spans",
        False,
        "also trace the worker's poller passes and heartbeats (INTERNAL spans 'kiq poll', 'kiq heartbeat')",
    ),
    kiq.ext.Setting.boolean(
        "otel_fleet_gauges",
        True,
        "observe the fleet's gauges (queue sizes and latencies, set sizes, processes): one Redis read per collection",
    ),
]


class OtelPlugin:
    """One per config: its tracer, instruments and cached attributes (``telemetry``)."""

    def __init__(self) -> None:
        self.telemetry = Telemetry()
        self._observed: object = None  # the meter the fleet's gauges are observed on (once per meter)

    def observe_fleet(self, config: kiq.Config) -> None:
        """The fleet's gauges (queue sizes and latencies, set sizes, processes) as observable instruments, on the
        telemetry's meter, once per meter; nothing while no SDK meter provider is set."""
        meter = self.telemetry.meter
        if self._observed is not meter and config.get("otel_fleet_gauges") and self.telemetry.measuring():
            observe_fleet(meter, config)
            self._observed = meter

    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return SETTINGS

    @kiq.hookimpl
    def kiq_client_middleware(self, chain: kiq.Chain[kiq.ClientMiddleware]) -> None:
        chain.add(ClientTracing, self.telemetry)

    @kiq.hookimpl
    def kiq_server_middleware(self, chain: kiq.Chain[kiq.ServerMiddleware]) -> None:
        chain.add(ServerTracing, self.telemetry)

    @kiq.hookimpl
    def kiq_startup(self, config: kiq.Config) -> None:
        """A worker whose process has no SDK provider set by now (its job modules are imported) records nothing
        per job, so it leaves the job chain: the plugin then costs the worker nothing per job."""
        if not self.telemetry.tracing() and not self.telemetry.measuring():
            config.server_middleware.remove(ServerTracing)
            log.info("otel: no SDK tracer or meter provider is set; jobs are not instrumented in this worker")
        self.observe_fleet(config)

    @kiq.hookimpl
    def kiq_push_bulk(self, config: kiq.Config, queue: str, count: int) -> AbstractContextManager[None]:
        """One ``send`` span for a whole ``push_bulk`` (called by the client around it)."""
        return batch_send(self.telemetry, config, queue, count)

    @kiq.hookimpl
    def kiq_operation(self, name: str, config: kiq.Config) -> AbstractContextManager[None] | None:
        """A ``kiq <name>`` span around a poll pass or a heartbeat, when ``otel_internal_spans`` is on."""
        if not config.get("otel_internal_spans") or not self.telemetry.tracing():
            return None
        return internal_span(self.telemetry, name, config)


def instrument(
    config: kiq.Config | None = None,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> Telemetry:
    """Enable the plugin on ``config`` (the default config when None) with these providers (None: global)."""
    config = config or kiq.default_config()
    plugin = config.add_plugin(OtelPlugin, "otel")
    plugin.telemetry.use(tracer_provider, meter_provider)
    plugin.observe_fleet(config)
    return plugin.telemetry
