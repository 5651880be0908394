"""Fixtures of the workflow tests: a config with the workflow plugin, and running its steps here (the real
Processor)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import kiq
from kiq.plugins.workflow import WorkflowPlugin
from tests.tracking_support import retry_now, work_off


@pytest.fixture
def config(config: kiq.Config) -> Iterator[kiq.Config]:
    """The suite's config (the process default, on a fresh Redis) with the workflow plugin."""
    config.add_plugin(WorkflowPlugin)
    yield config


def drain(config: kiq.Config, queue: str = "default", retries: bool = False) -> int:
    """Run the steps waiting in ``queue`` here until it stays empty (successors too); with ``retries``, pending
    retries are run at once. Returns how many ran."""
    ran = 0
    while True:
        count = work_off(config, queue)
        if retries:
            count += retry_now(config) and work_off(config, queue)
        if not count:
            return ran
        ran += count
