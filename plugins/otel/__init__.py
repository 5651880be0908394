"""OpenTelemetry tracing and metrics for kiq jobs (needs only ``opentelemetry-api``; bring your own SDK).

Enable it like any plugin: ``plugins = ["otel"]`` (or ``KIQ_PLUGINS=otel``), ``config.plugins.register(
kiq.plugins.otel)``, or ``kiq.plugins.otel.instrument(config, tracer_provider=..., meter_provider=...)`` to
use providers other than the global ones. See the README, "OpenTelemetry tracing and metrics".
"""

from __future__ import annotations

import logging
import sys
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import metrics, trace

import kiq
from kiq.config import as_bool, as_choice

from .internal import internal_span
from .middleware import LINK_MODES, ClientTracing, ServerTracing, batch_send
from .telemetry import Telemetry, telemetry_for

log = logging.getLogger("kiq.otel")

__all__ = ["ClientTracing", "ServerTracing", "instrument"]

_SETTINGS = [
    kiq.Setting(
        "otel_link_mode",
        "link",
        as_choice(*LINK_MODES),
        "how a job's process span relates to its producer: link (semconv default) or child",
    ),
    kiq.Setting(
        "otel_internal_spans",
        False,
        as_bool,
        "also trace the worker's poller passes and heartbeats (INTERNAL spans 'kiq poll', 'kiq heartbeat')",
    ),
]


@kiq.hookimpl
def kiq_settings() -> list[kiq.Setting]:
    return _SETTINGS


@kiq.hookimpl
def kiq_client_middleware(chain: kiq.Chain[Any], config: kiq.Config) -> None:
    chain.add(ClientTracing, telemetry_for(config))


@kiq.hookimpl
def kiq_server_middleware(chain: kiq.Chain[Any], config: kiq.Config) -> None:
    chain.add(ServerTracing, telemetry_for(config))


@kiq.hookimpl
def kiq_startup(config: kiq.Config) -> None:
    """A worker whose process has no SDK provider set by now (its job modules are imported) records nothing per
    job, so it leaves the job chain: the plugin then costs the worker nothing per job."""
    telemetry = telemetry_for(config)
    if not telemetry.tracing() and not telemetry.measuring():
        config.server_middleware.remove(ServerTracing)
        log.info("otel: no SDK tracer or meter provider is set; jobs are not instrumented in this worker")


@kiq.hookimpl
def kiq_push_bulk(config: kiq.Config, queue: str, count: int) -> AbstractContextManager[None]:
    """One ``send`` span for a whole ``push_bulk`` (called by the client around it)."""
    return batch_send(telemetry_for(config), config, queue, count)


@kiq.hookimpl
def kiq_operation(name: str, config: kiq.Config) -> AbstractContextManager[None] | None:
    """A ``kiq <name>`` span around a poll pass or a heartbeat, when ``otel_internal_spans`` is on."""
    telemetry = telemetry_for(config)
    if not config.get("otel_internal_spans") or not telemetry.tracing():
        return None
    return internal_span(telemetry, name, config)


def instrument(
    config: kiq.Config | None = None,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> Telemetry:
    """Enable the plugin on ``config`` (the default config when None) with these providers (None: global)."""
    config = config or kiq.default_config()
    telemetry = telemetry_for(config)
    telemetry.use(tracer_provider, meter_provider)
    config.add_plugin(sys.modules[__name__], "otel")
    return telemetry
