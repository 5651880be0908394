"""Jobs for the Metrics page's screenshot run (tests/contrib/web/test_metrics_run.py): a shop's jobs on two
queues, with durations that differ per class and one class that fails for some of its arguments."""

from __future__ import annotations

import time

import kiq

FAILING_EVERY = 4  # SyncStock fails for every fourth SKU


class EmailReceipt(kiq.Job):
    kiq_name = "EmailReceipt"
    kiq_options = {"queue": "critical"}

    def perform(self, order: int) -> None:
        time.sleep(0.002)


class ResizeImage(kiq.Job):
    kiq_name = "ResizeImage"

    def perform(self, image: int, milliseconds: int) -> None:
        time.sleep(milliseconds / 1000)


class SyncStock(kiq.Job):
    """Fails for every ``FAILING_EVERY``-th SKU; ``retry: False``, so each failure is one attempt, no retry."""

    kiq_name = "SyncStock"
    kiq_options = {"retry": False}

    def perform(self, sku: int) -> None:
        time.sleep(0.01)
        if sku % FAILING_EVERY == 0:
            raise ConnectionError(f"the warehouse did not answer for SKU {sku}")
