"""Fixtures of the batch tests: a config with the batch plugin, and running its jobs here (the real Processor)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

import kiq
from kiq.plugins.batch import BatchPlugin
from tests.jobs.batch import FIRED
from tests.tracking_support import work_off


@pytest.fixture
def config(config: kiq.Config) -> Iterator[kiq.Config]:
    """The suite's config (the process default, on a fresh Redis) with the batch plugin."""
    plugin = config.add_plugin(BatchPlugin)
    yield config
    plugin.kiq_shutdown(config)  # the outcome writer's thread


def drain(config: kiq.Config, queue: str = "default") -> int:
    """Run the jobs of ``queue`` here until it stays empty (callbacks too), each outcome written before the next
    round; returns how many ran."""
    plugin = config.plugins.find(BatchPlugin)
    assert plugin is not None
    ran = 0
    while True:
        assert plugin.flush(10)  # outcomes written: the callbacks they fire are in the queue
        count = work_off(config, queue)
        if not count:
            return ran
        ran += count


def fired(r: redis.Redis) -> dict[str, int]:
    """Runs of each callback: ``{"<bid>:<event>": runs}``."""
    return {name: int(count) for name, count in r.hgetall(FIRED).items()}


def events(r: redis.Redis, bid: str) -> dict[str, int]:
    """Runs of the callbacks of batch ``bid``, by event."""
    return {name.rpartition(":")[2]: count for name, count in fired(r).items() if name.startswith(bid + ":")}
