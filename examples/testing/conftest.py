"""The app's own test setup: empty the app's records before each test."""

from __future__ import annotations

import pytest
import shop


@pytest.fixture(autouse=True)
def fresh_records() -> None:
    shop.sent.clear()
    shop.charges.clear()
    shop.deaths.clear()
