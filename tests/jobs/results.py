"""Jobs for tests/plugins/results (a worker loads them with ``-r tests.jobs.results`` and ``KIQ_PLUGINS=results``)."""

from __future__ import annotations

import asyncio
import datetime
import math
from typing import Any

import kiq
from tests.jobs import deep

# what ReturnsThis returns for each name: values that are not strict JSON, and one that is
VALUES: dict[str, Any] = {
    "deep": deep(5000),
    "set": {1, 2},
    "tuple": (1, 2),
    "nan": math.nan,
    "datetime": datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC),
    "bytes": b"raw",
    "int key": {1: "one"},
    "json": {"nested": [1, 2.5, None, True, "caf\udce9"], "big": 2**70},
}


class Price(kiq.Job):
    kiq_name = "ResultsPrice"
    kiq_options = {"result_ttl": 60}

    def perform(self, number: int) -> dict[str, Any]:
        return {"number": number, "price": number * 1.5, "tags": ["a", "b"]}


@kiq.job(name="ResultsAsyncPrice", result_ttl=60)
async def async_price(number: int) -> list[Any]:
    await asyncio.sleep(0.01)
    return [number, "async"]


class ReturnsThis(kiq.Job):
    kiq_name = "ResultsReturnsThis"
    kiq_options = {"result_ttl": 60, "retry": 3}

    def perform(self, name: str) -> Any:
        return VALUES[name]


class Unkept(kiq.Job):
    """Keeps no result unless the job_result_ttl setting says so."""

    kiq_name = "ResultsUnkept"

    def perform(self) -> int:
        return 7


class Dies(kiq.Job):
    kiq_name = "ResultsDies"
    kiq_options = {"result_ttl": 60, "retry": 0}

    def perform(self) -> None:
        raise RuntimeError("no value today")


class TrackedPrice(Price):
    """Tracked on its own (its event is at ``/jobs/<jid>``), keeping its result."""

    kiq_name = "ResultsTrackedPrice"
    kiq_options = {"track": True}


class TrackedSet(ReturnsThis):
    kiq_name = "ResultsTrackedSet"
    kiq_options = {"track": True}
