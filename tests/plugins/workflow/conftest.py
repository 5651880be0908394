"""Fixtures of the workflow tests: a config with the workflow plugin, running its steps here (the real
Processor), and the environment of real workers on reliable fetch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import kiq
from kiq.plugins.workflow import WorkflowPlugin
from tests.support import FAST
from tests.tracking_support import retry_now, work_off

# real workers on reliable fetch, recovering a killed worker's jobs within a second
RELIABLE_ENV = {
    **FAST,
    "KIQ_PLUGINS": "workflow reliable_fetch",
    "KIQ_RELIABLE_RECOVERY_INTERVAL": "1",
    "KIQ_RELIABLE_MAX_INTERRUPTS": "1000",  # every interruption in these tests is the test's doing
}


@pytest.fixture
def config(config: kiq.Config) -> Iterator[kiq.Config]:
    """The suite's config (the process default, on a fresh Redis) with the workflow plugin."""
    config.add_plugin(WorkflowPlugin)
    yield config


@pytest.fixture
def e2e_workflow_config(e2e_config: kiq.Config) -> kiq.Config:
    """The config of a test with real workers (e2e_config), with the workflow plugin."""
    e2e_config.add_plugin("workflow")
    return e2e_config


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
