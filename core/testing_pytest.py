"""kiq's pytest plugin (the ``pytest11`` entry point ``kiq``): fixtures over kiq.testing's modes.

def test_signup_sends_a_welcome_mail(kiq_fake):
    signup("ada@example.com")
    assert [job["args"] for job in WelcomeMail.jobs] == [["ada@example.com"]]
    kiq_fake.drain()
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import testing


@pytest.fixture
def kiq_fake() -> Iterator[testing.Fake]:
    """Pushes are captured in memory for the test (``kiq.testing.fake()``): ``.jobs()``, ``.drain()``, ``.dead``."""
    with testing.fake() as captured:
        yield captured


@pytest.fixture
def kiq_inline() -> Iterator[testing.Inline]:
    """Every job runs when it is pushed, for the test (``kiq.testing.inline()``)."""
    with testing.inline() as running:
        yield running
