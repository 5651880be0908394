"""The groups plugin's fleet metrics (``kiq_metrics``, scope ``"fleet"``), labelled by queue only (bounded): groups
with waiting or running jobs, jobs waiting in groups, slots in use."""

from __future__ import annotations

import kiq
import kiq.ext

from .listing import all_groups


def fleet_readings(config: kiq.Config) -> list[kiq.ext.Reading]:
    readings: list[kiq.ext.Reading] = []
    for groups in all_groups(config, limit=0):
        labels = (("queue", groups.queue),)
        readings.append(
            kiq.ext.Reading("kiq_groups_active", groups.active, labels, help="job groups with jobs waiting or running")
        )
        readings.append(
            kiq.ext.Reading("kiq_group_jobs_waiting", groups.waiting, labels, help="jobs waiting in groups, per queue")
        )
        readings.append(
            kiq.ext.Reading("kiq_group_jobs_running", groups.running, labels, help="group slots in use, per queue")
        )
    return readings
