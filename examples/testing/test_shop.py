"""How an app tests code that pushes jobs, with kiq's pytest fixtures (``kiq_fake``, ``kiq_inline``)."""

from __future__ import annotations

import shop

import kiq


def test_checkout_enqueues_a_charge(kiq_fake: kiq.testing.Fake) -> None:
    answer = shop.checkout("o-1", "4242")
    assert answer["status"] == "processing"
    assert [job["args"] for job in shop.ChargeCard.jobs] == [["o-1", "4242"]]
    assert shop.charges == {}  # captured, not run


def test_draining_runs_the_charge_and_the_receipt_it_pushes(kiq_fake: kiq.testing.Fake) -> None:
    shop.checkout("o-2", "4242")
    kiq_fake.drain()
    assert shop.charges == {"o-2": 1} and shop.sent == ["receipt o-2 to buyer@example.com"]


def test_a_timeout_is_retried_and_a_declined_card_dies(kiq_fake: kiq.testing.Fake) -> None:
    shop.checkout("slow", "4242")
    shop.checkout("o-3", "0000")
    kiq_fake.drain()
    assert shop.charges == {"slow": 1}  # failed once, then its retry succeeded
    assert shop.deaths == ["o-3"]  # two retries, then dead: the death handler ran
    (dead,) = kiq_fake.dead_jobs
    assert (dead["error_class"], dead["retry_count"]) == ("ValueError", 2)


def test_inline_runs_the_jobs_at_once(kiq_inline: kiq.testing.Inline) -> None:
    shop.checkout("o-4", "4242")
    assert shop.charges == {"o-4": 1} and shop.sent == ["receipt o-4 to buyer@example.com"]
