"""Jobs for tests/plugins/encryption (a worker loads them with ``-r tests.jobs.encryption`` and
``KIQ_PLUGINS=encryption``): each records what ``perform`` received, so a test can tell the clear value arrived."""

from __future__ import annotations

import json
from typing import Any

import kiq

RECEIVED = "encryption-test:received"  # LIST of JSON [jid, args, kwargs], one per perform


def record(job: kiq.Job, args: list[Any], kwargs: dict[str, Any]) -> None:
    kiq.default_config().redis.rpush(RECEIVED, json.dumps([job.jid, args, kwargs]))


class ChargeCard(kiq.Job):
    kiq_name = "EncChargeCard"
    kiq_options = {"encrypt": True}

    def perform(self, order_id: int, card: Any) -> None:
        record(self, [order_id, card], {})


class Enroll(kiq.Job):
    kiq_name = "EncEnroll"
    kiq_options = {"encrypt": ["ssn", "card"]}

    def perform(self, user_id: int, ssn: str | None = None, card: Any = None, note: str = "") -> None:
        record(self, [user_id], {"ssn": ssn, "card": card, "note": note})


class AsyncCharge(kiq.Job):
    kiq_name = "EncAsyncCharge"
    kiq_options = {"encrypt": True}

    async def perform(self, order_id: int, card: Any) -> None:
        record(self, [order_id, card], {})


class FailingCharge(kiq.Job):
    """Fails every time, after it saw its value: its retry and dead entries must stay encrypted."""

    kiq_name = "EncFailingCharge"
    kiq_options = {"encrypt": True, "retry": 1}

    def perform(self, order_id: int, card: Any) -> None:
        record(self, [order_id, card], {})
        raise RuntimeError("the gateway said no")
