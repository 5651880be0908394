"""Jobs for tests/plugins/periodic (a worker loads them with ``-r tests.jobs.periodic``, ``KIQ_PLUGINS=periodic``)."""

from __future__ import annotations

import json
import os

import kiq

TICKS = "periodic-test:ticks"  # LIST of JSON {"at": the tick, "label", "pid"}, one per run


class Tick(kiq.Job):
    kiq_name = "PeriodicTick"

    def perform(self, label: str) -> None:
        entry = {"at": self.job["periodic_at"], "label": label, "pid": os.getpid()}
        kiq.default_config().redis.rpush(TICKS, json.dumps(entry))
