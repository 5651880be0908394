"""The fleet's gauges as OpenTelemetry observable instruments, collected by the SDK's in-memory reader from a real
Redis: the same values as ``/metrics`` (kiq.api.fleet)."""

from __future__ import annotations

import kiq
from kiq.plugins.otel.gauges import QUEUE
from tests.plugins.otel.test_middleware import Greet, Telemetry, telemetry

__all__ = ["telemetry"]  # the fixture, shared with the middleware's tests


def test_the_fleets_gauges_are_observable_instruments(config: kiq.Config, telemetry: Telemetry) -> None:
    config.queues = ["default", "reports"]  # a known queue: a label of its own
    Greet.set(queue="reports").perform_bulk([["a"], ["b"], ["c"]])
    Greet.set(queue="later").perform_in(3600, "d")
    sizes = {point.attributes[QUEUE]: point.value for point in telemetry.points("kiq.queue.size")}
    assert sizes == {"reports": config.redis.llen("queue:reports")} == {"reports": 3}
    (latency,) = telemetry.points("kiq.queue.latency")
    assert latency.value >= 0 and dict(latency.attributes) == {QUEUE: "reports"}
    assert [point.value for point in telemetry.points("kiq.scheduled_set.size")] == [1]
    assert [point.value for point in telemetry.points("kiq.dead_set.size")] == [0]
    assert [point.value for point in telemetry.points("kiq.processes")] == [0]
