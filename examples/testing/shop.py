"""A small app whose code pushes jobs: what examples/testing/test_shop.py tests with kiq's pytest fixtures."""

from __future__ import annotations

from typing import Any

import kiq

sent: list[str] = []  # what the mailer "sent", for the tests to read
charges: dict[str, int] = {}
deaths: list[str] = []


class SendReceipt(kiq.Job):
    kiq_options = {"queue": "mail", "retry": 3}

    def perform(self, order_id: str, email: str) -> None:
        sent.append(f"receipt {order_id} to {email}")


class ChargeCard(kiq.Job):
    """The payment provider times out on the first attempt of order "slow"; card "0000" is always declined."""

    kiq_options = {"retry": 2}

    def perform(self, order_id: str, card: str) -> None:
        if card == "0000":
            raise ValueError(f"card declined for order {order_id}")
        if order_id == "slow" and "retry_count" not in self.job:
            raise TimeoutError("payment provider timed out")
        charges[order_id] = charges.get(order_id, 0) + 1
        SendReceipt.perform_async(order_id, "buyer@example.com")


class AlertOps:
    """A death handler: the app tells its operators when a charge gives up."""

    @kiq.hookimpl
    def kiq_death(self, job: dict[str, Any]) -> None:
        deaths.append(job["args"][0])


def checkout(order_id: str, card: str) -> dict[str, str]:
    """The view: answers at once and leaves the charge to a job."""
    jid = ChargeCard.perform_async(order_id, card)
    return {"order": order_id, "status": "processing", "job": str(jid)}
