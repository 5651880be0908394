"""Jobs for the Workflows tab's tests (tests/plugins/workflow/test_web_tab.py and the browser test): an order's
steps that pass results along, and a step that always fails and dies at once (``retry: 0``)."""

from __future__ import annotations

import kiq


class FetchOrder(kiq.Job):
    kiq_name = "FetchOrder"

    def perform(self, order_id: int) -> dict[str, int]:
        return {"order": order_id, "items": 3}


class PriceItem(kiq.Job):
    kiq_name = "PriceItem"

    def perform(self, order: dict[str, int], item: int) -> int:
        return 10 * item + order["order"]


class SumPrices(kiq.Job):
    kiq_name = "SumPrices"

    def perform(self, prices: list[int]) -> int:
        return sum(prices)


class ChargeCard(kiq.Job):
    """Always declined: with ``retry: 0`` it dies on its first failure and fails its workflow."""

    kiq_name = "ChargeCard"
    kiq_options = {"retry": 0}

    def perform(self, amount: int) -> None:
        raise RuntimeError(f"card declined for {amount} EUR")


class SendReceipt(kiq.Job):
    kiq_name = "SendReceipt"

    def perform(self, amount: int) -> str:
        return f"receipt for {amount}"


class Refund(kiq.Job):
    """A job whose wire name is dotted, as a Python class's qualified name is by default."""

    kiq_name = "shop.billing.Refund"

    def perform(self, amount: int) -> int:
        return -amount
