"""The ``cli`` fixture: ``kiq`` run in this process against the test's Redis (see helpers.Cli)."""

from __future__ import annotations

import pytest

import kiq
from tests.cli.helpers import Cli


@pytest.fixture
def cli(config: kiq.Config, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(config, capsys)
