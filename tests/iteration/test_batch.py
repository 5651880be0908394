"""An iterable job in a batch (the batch plugin, workers in this process): its interruptions are not outcomes, so
the batch's ``complete`` fires once, after the walk's end, never at an interruption (Sidekiq Pro fixed this in 7.3.7,
#6889)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator

import pytest

import kiq
from kiq.plugins.batch import Batch, BatchPlugin, status
from tests.jobs.batch import FIRED, Callback
from tests.jobs.iteration import HOOKS, QUEUE, SEEN, Walk
from tests.support import FAST, WorkerProcess, wait_until

StartWorker = Callable[..., WorkerProcess]
ARGS = ("-r", "tests.jobs.iteration", "-r", "tests.jobs.batch", "-q", QUEUE, "-q", "default", "-c", "2")
ENV = {**FAST, "KIQ_PLUGINS": "batch", "KIQ_ITERATION_FLUSH_INTERVAL": "0.05", "KIQ_MAX_ITERATION_RUNTIME": "0.3"}
ITEMS = 1500


@pytest.fixture
def config(e2e_config: kiq.Config) -> Iterator[kiq.Config]:
    plugin = e2e_config.add_plugin(BatchPlugin)
    yield e2e_config
    plugin.kiq_shutdown(e2e_config)


def test_an_interrupted_iterable_job_does_not_complete_its_batch_early(
    config: kiq.Config, start_worker: StartWorker
) -> None:
    r = config.redis
    with Batch(on_complete=Callback, on_success=Callback) as batch:
        Walk.perform_async(ITEMS, 0.001)
    worker = start_worker(*ARGS, env=ENV)
    # interrupted by max_iteration_runtime (re-pushed), then by a TERM: no callback meanwhile
    wait_until(lambda: any(hook.startswith("resume:") for hook in r.lrange(HOOKS, 0, -1)), 60, message="a re-push")
    assert not r.hgetall(FIRED)
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    assert not r.hgetall(FIRED) and r.hlen(SEEN) < ITEMS
    worker = start_worker(*ARGS, env=ENV)

    def callbacks() -> dict[str, str]:
        fired = r.hgetall(FIRED)
        if fired:  # the walk had ended when the first callback ran
            assert r.hlen(SEEN) == ITEMS and r.lrange(HOOKS, -1, -1) == ["complete"]
        return fired

    wait_until(lambda: len(callbacks()) == 2, 90, interval=0.1, message="the batch's callbacks")
    worker.stop()
    assert callbacks() == {f"{batch.bid}:complete": "1", f"{batch.bid}:success": "1"}
    found = status(batch.bid)
    assert found is not None and found.total == 1 and found.success
    assert sum(hook.startswith("resume:") for hook in r.lrange(HOOKS, 0, -1)) >= 2
