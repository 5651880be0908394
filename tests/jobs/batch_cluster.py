"""Jobs for the batch plugin's cluster tests (``-r tests.jobs.batch_cluster``): those of tests.jobs.batch, and a
callback that records itself with one command (tests.jobs.batch's ``Callback`` writes three keys in a MULTI, which
a Redis Cluster refuses across slots)."""

from __future__ import annotations

from typing import Any

import kiq
from tests.jobs.batch import FIRED, Dies, Noop, redis

__all__ = ["Dies", "Noop", "Recorded"]


class Recorded(kiq.Job):
    """A batch callback: counts the event it was pushed for in ``FIRED``."""

    kiq_name = "BatchRecorded"

    def perform(self, *args: Any) -> None:
        fired = self.job["batch_callback"]
        redis().hincrby(FIRED, f"{fired['bid']}:{fired['event']}", 1)
