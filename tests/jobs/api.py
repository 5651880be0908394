"""Jobs for the API and poller end-to-end tests: each run is recorded in a Redis list the test reads."""

from __future__ import annotations

import json
import time

import kiq

RUNS_KEY = "api-test:runs"


class RecordRun(kiq.Job):
    """Appends ``{"label": ..., "at": <epoch seconds>}`` to ``RUNS_KEY`` when it runs."""

    def perform(self, label: str) -> None:
        kiq.default_config().redis.rpush(RUNS_KEY, json.dumps({"label": label, "at": time.time()}))
