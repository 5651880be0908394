"""The limiter's metrics (``kiq_metrics``): per process, how often and how long ``with limiter:`` waited for room
(``kiq_limiter_waits_total``, ``kiq_limiter_wait_seconds_total``, kiq.plugins.limiter.waits); for the fleet, the
jobs rescheduled because a limiter stayed full (``kiq_limiter_reschedules_total``, from the
``kiq:limiter:overrated`` hash). The label ``limiter`` is ``<kind>:<name>``, bounded as in kiq.plugins.limiter.waits.
"""

from __future__ import annotations

import kiq
import kiq.ext

from .scripts import OVERRATED
from .waits import MAX_LIMITERS, OTHER, waits

WAITS_HELP = "acquisitions of a limiter that had to wait for room (they ended with room or OverLimit)"
SECONDS_HELP = "seconds spent waiting for a limiter's room"
RESCHEDULES_HELP = "jobs rescheduled because a limiter had no room within its wait_timeout"


def process_readings() -> list[kiq.ext.Reading]:
    readings = []
    for label, (count, seconds) in sorted(waits.copy().items()):
        labels = (("limiter", label),)
        readings.append(kiq.ext.Reading("kiq_limiter_waits_total", count, labels, "counter", WAITS_HELP))
        readings.append(kiq.ext.Reading("kiq_limiter_wait_seconds_total", seconds, labels, "counter", SECONDS_HELP))
    return readings


def fleet_readings(config: kiq.Config) -> list[kiq.ext.Reading]:
    """The fleet's reschedules per limiter (the first MAX_LIMITERS by name, the rest summed as "other")."""
    redis = config.redis
    counts: dict[str, str] = redis.hgetall(kiq.ext.keyspace(redis).key(OVERRATED))  # type: ignore[assignment]
    per_label: dict[str, float] = {}
    for index, (field, count) in enumerate(sorted(counts.items())):
        label = field if index < MAX_LIMITERS else OTHER
        per_label[label] = per_label.get(label, 0) + int(count)
    return [
        kiq.ext.Reading("kiq_limiter_reschedules_total", count, (("limiter", label),), "counter", RESCHEDULES_HELP)
        for label, count in per_label.items()
    ]
