"""Jobs for tests/plugins/results (a worker loads them with ``-r tests.jobs.results`` and ``KIQ_PLUGINS=results``)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import math
import uuid
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


# typed results: perform's return annotation types the stored value, as annotations type arguments
@dataclasses.dataclass
class Quote:
    sku: uuid.UUID
    amount: decimal.Decimal
    at: datetime.datetime


QUOTE = Quote(uuid.UUID(int=7), decimal.Decimal("12.30"), datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC))


class Total(kiq.Job):
    kiq_name = "ResultsTotal"
    kiq_options = {"result_ttl": 60, "retry": 3}

    def perform(self, cents: int) -> decimal.Decimal:
        return decimal.Decimal(cents) / 100


class Quoted(kiq.Job):
    kiq_name = "ResultsQuoted"
    kiq_options = {"result_ttl": 60}

    def perform(self) -> Quote:
        return QUOTE


@kiq.job(name="ResultsAsyncDue", result_ttl=60)
async def async_due(days: int) -> datetime.date:
    await asyncio.sleep(0.01)
    return datetime.date(2026, 1, 1) + datetime.timedelta(days=days)


class NotATotal(kiq.Job):
    """Annotated ``-> Decimal``, returns a text that is no number."""

    kiq_name = "ResultsNotATotal"
    kiq_options = {"result_ttl": 60, "retry": 3}

    def perform(self) -> decimal.Decimal:
        return "twelve"  # type: ignore[return-value]
