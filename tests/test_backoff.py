"""kiq.ext.Backoff: the pauses of every retry loop of kiq and its plugins."""

from __future__ import annotations

import pytest

import kiq
import kiq.ext


def test_pauses_double_from_first_up_to_cap() -> None:
    backoff = kiq.ext.Backoff(0.25, 2.0)
    assert [backoff.next() for _ in range(6)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]


def test_reset_starts_again_from_first() -> None:
    backoff = kiq.ext.Backoff(0.05, 1.0)
    backoff.next(), backoff.next()
    backoff.reset()
    assert backoff.next() == 0.05 and backoff.next() == 0.1


def test_a_cap_that_is_not_a_doubling_of_first_is_reached_exactly() -> None:
    backoff = kiq.ext.Backoff(1.0, 30.0)
    assert [backoff.next() for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


@pytest.mark.parametrize(("first", "cap"), [(0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_first_must_be_positive_and_at_most_cap(first: float, cap: float) -> None:
    with pytest.raises(ValueError, match="0 < first <= cap"):
        kiq.ext.Backoff(first, cap)
