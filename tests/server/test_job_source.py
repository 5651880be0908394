"""The ``kiq_job_source`` seam: both shipped fetchers take a capsule's jobs from a plugin's ``JobSource`` when one
answers (the reliable fetcher passes its working lists as ``into``), and wait on its ``block`` when it has none."""

from __future__ import annotations

from typing import Any

import pytest

import kiq
import kiq.ext
from kiq.plugins.reliable_fetch import ReliableFetch
from kiq.server.fetch import BasicFetch
from tests.support import short_block

JOB = '{"class":"X","args":[],"jid":"0123456789abcdef01234567"}'


class OneJob:
    """Hands out one job, then none; records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def pop(self, connection: Any, queues: list[str], wanted: int, into: list[str] | None = None) -> list[Any]:
        self.calls.append(("pop", queues, wanted, into))
        return [("default", JOB)] if len(self.calls) == 1 else []

    def block(self, connection: Any, queues: list[str], timeout: float, into: list[str] | None = None) -> list[Any]:
        self.calls.append(("block", queues, into))
        return []


class SourcePlugin:
    def __init__(self) -> None:
        self.source = OneJob()

    @kiq.hookimpl
    def kiq_job_source(self, capsule: kiq.ext.Capsule) -> OneJob:
        return self.source


@pytest.mark.parametrize("fetcher", [BasicFetch, ReliableFetch])
def test_the_fetchers_take_jobs_from_a_plugins_source(config: kiq.Config, fetcher: type[Any]) -> None:
    plugin = config.add_plugin(SourcePlugin())
    config.add_plugin("reliable_fetch")
    capsule = kiq.ext.Capsule("default", [("default", 0), ("low", 0)], 1, config, identity="host:1:abc")
    fetch = short_block(fetcher(capsule))
    try:
        unit = fetch.retrieve_work()
        assert unit is not None and (unit.queue_name, unit.job) == ("default", JOB)
        assert fetch.retrieve_work() is None
    finally:
        fetch.close()
    first, *rest = plugin.source.calls
    assert first[0] == "pop" and first[1] == ["default", "low"] and first[2] == 1
    into = first[3]
    assert (into is None) == (fetcher is BasicFetch)  # the reliable fetcher's working list per queue
    assert any(call[0] == "block" for call in rest)
