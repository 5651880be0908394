"""The fleet's gauges as OpenTelemetry observable instruments: what ``/metrics`` serves from Redis (kiq.api.fleet),
read when the SDK's reader collects (all instruments of one collection share one Redis read: cached ~1 s).

Names follow OpenTelemetry's dotted style: ``kiq_queue_size`` is ``kiq.queue.size``, ``kiq_queue_latency_seconds``
is ``kiq.queue.latency`` (unit ``s``) and so on (``NAMES``); the ``queue`` label is the semconv attribute
``messaging.destination.name``. The plugins' fleet readings known when the instruments are made (a first read at
start, Redis permitting) come too, as ``kiq.<rest of their name>``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

import kiq
from kiq.api.fleet import FleetGauges

log = logging.getLogger("kiq.otel")

QUEUE = "messaging.destination.name"
# Prometheus name -> (OpenTelemetry name, unit)
NAMES = {
    "kiq_queue_size": ("kiq.queue.size", "{job}"),
    "kiq_queue_latency_seconds": ("kiq.queue.latency", "s"),
    "kiq_retry_set_size": ("kiq.retry_set.size", "{job}"),
    "kiq_dead_set_size": ("kiq.dead_set.size", "{job}"),
    "kiq_scheduled_set_size": ("kiq.scheduled_set.size", "{job}"),
    "kiq_processes": ("kiq.processes", "{process}"),
    "kiq_busy_threads": ("kiq.busy_threads", "{thread}"),
    "kiq_concurrency": ("kiq.concurrency", "{thread}"),
}


def observe_fleet(meter: metrics.Meter, config: kiq.Config) -> list[object]:
    """Make the observable instruments on ``meter``; returns them (the meter keeps them alive too)."""
    kinds = {name: "gauge" for name in NAMES}
    try:  # which plugins' readings there are (a reader of its own: the first collection must not get this one)
        kinds.update({reading.name: reading.kind for reading in FleetGauges(config).readings()})
    except Exception as exc:  # Redis away at start: the core gauges still come, the plugins' from a later start
        log.warning("otel: the fleet's gauges could not be read at start (%s): only kiq's own are observed", exc)
    fleet = FleetGauges(config)
    instruments: list[object] = []
    for name, kind in kinds.items():
        otel_name, unit = NAMES.get(name, (f"kiq.{name.removeprefix('kiq_')}", ""))
        callback = _observer(fleet, name)
        make = meter.create_observable_counter if kind == "counter" else meter.create_observable_gauge
        instruments.append(make(otel_name, callbacks=[callback], unit=unit, description=name))
    return instruments


def _observer(fleet: FleetGauges, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        try:
            readings = fleet.readings()
        except Exception as exc:  # Redis away: nothing observed this time (the next collection asks again)
            log.debug("otel: the fleet's gauges could not be read: %s", exc)
            return []
        return [
            Observation(reading.value, {QUEUE if label == "queue" else label: value for label, value in reading.labels})
            for reading in readings
            if reading.name == name
        ]

    return observe
