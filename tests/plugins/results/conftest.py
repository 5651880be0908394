"""Fixtures of the results tests: a config with the results plugin."""

from __future__ import annotations

import pytest

import kiq
from kiq.plugins.results import ResultsPlugin


@pytest.fixture
def config(config: kiq.Config) -> kiq.Config:
    """The suite's config (the process default, on a fresh Redis) with the results plugin."""
    config.add_plugin(ResultsPlugin)
    return config
