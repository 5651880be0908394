"""Results in a real ``kiq worker``: a sync and an async job's values come back by jid, a value that is not JSON is
the job's recorded error, and the worker logs it as failed without retrying it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import kiq
from kiq.plugins.results import ResultError, result
from tests.jobs.results import Price, ReturnsThis, async_price
from tests.support import FAST, WorkerProcess


def test_sync_and_async_results_from_a_worker(
    e2e_config: kiq.Config, start_worker: Callable[..., WorkerProcess]
) -> None:
    e2e_config.add_plugin("results")
    sync_jid, async_jid, bad_jid = (
        Price.perform_async(3),
        async_price.perform_async(5),
        ReturnsThis.perform_async("set"),
    )
    worker = start_worker("-r", "tests.jobs.results", "-c", "2", env={**FAST, "KIQ_PLUGINS": "results"})
    assert result(str(sync_jid), wait=30) == {"number": 3, "price": 4.5, "tags": ["a", "b"]}
    assert result(str(async_jid), wait=30) == [5, "async"]
    with pytest.raises(ResultError, match=r"returned set .* not strict JSON"):
        result(str(bad_jid), wait=30)
    assert e2e_config.redis.zcard("retry") == 0
    assert worker.stop() == 0
    assert "fail: ResultError" in worker.output()
