"""Jobs for tests/contrib/test_sentry.py."""

from __future__ import annotations

import asyncio

import kiq


class Charge(kiq.Job):
    """Fails every attempt; one retry, then it dies."""

    kiq_name = "SentryCharge"
    kiq_options = {"retry": 1, "queue": "billing"}

    def perform(self, order: int, password: str = "") -> None:
        raise RuntimeError(f"card declined for order {order}")


class Receipt(kiq.Job):
    kiq_name = "SentryReceipt"
    kiq_options = {"queue": "billing"}

    def perform(self, order: int) -> int:
        return order


@kiq.job(name="SentryAsyncCharge", queue="billing", retry=0)
async def async_charge(order: int) -> None:
    await asyncio.sleep(0.01)
    raise RuntimeError(f"async card declined for order {order}")
