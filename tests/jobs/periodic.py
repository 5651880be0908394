"""Jobs for tests/plugins/periodic (a worker loads them with ``-r tests.jobs.periodic``, ``KIQ_PLUGINS=periodic``)."""

from __future__ import annotations

import datetime
import json
import os

import kiq

TICKS = "periodic-test:ticks"  # LIST of JSON {"at": the tick, "label", "pid", "note", "day"}, one per run


class Tick(kiq.Job):
    kiq_name = "PeriodicTick"

    def perform(self, label: str, *, note: str = "", day: datetime.date | None = None) -> None:
        # day as the type perform received (a schedule gives it as JSON text; the annotation converts it)
        shown_day = None if day is None else [type(day).__name__, day.isoformat()]
        entry = {"at": self.job["periodic_at"], "label": label, "pid": os.getpid(), "note": note, "day": shown_day}
        kiq.default_config().redis.rpush(TICKS, json.dumps(entry))
