"""An async iterable job whose ``each_iteration`` blocks the event loop (``time.sleep`` in a coroutine): it cannot
look at the stopping flag until the item returns. The loop watchdog reports it (a WARNING naming the job and the
blocking call), and a TERM still ends the worker within ``-t`` + 2 s: the job is requeued (not lost) and the walk
resumes from its last save."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import kiq
import kiq.ext
from tests.jobs.iteration_adversarial import QUEUE, BlocksTheLoop, items_run
from tests.support import WorkerProcess, wait_until

STOP_TIMEOUT = 1.0  # -t
EXIT_GRACE = 2.0  # the worker's promise: TERM -> exit within -t + 2 s
SLACK = 2.0  # signal delivery and interpreter exit on a loaded machine


def test_a_blocked_loop_is_reported_and_term_still_stops_in_time(
    e2e_config: kiq.Config, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    r = e2e_config.redis
    base = tmp_path / "walk"
    jid = BlocksTheLoop.perform_async(3, 60.0, str(base))  # every item blocks the loop for a minute
    worker = start_worker(
        "-r", "tests.jobs.iteration_adversarial", "-q", QUEUE, "-c", "2", "-t", str(STOP_TIMEOUT),
        env={"KIQ_ASYNC_BLOCK_WARNING": "0.5"},
    )  # fmt: skip
    wait_until(lambda: items_run(base) == [0], 60, message="the first item blocking the loop")
    wait_until(lambda: "has been blocked for" in worker.output(), 30, message="the loop watchdog's warning")
    [warning] = [line for line in worker.output().splitlines() if "has been blocked for" in line]
    assert "BlocksTheLoop" in warning and jid in warning, warning
    assert "time.sleep(block)" in worker.output()  # the blocking call, from the loop thread's stack

    worker.signal(signal.SIGTERM)
    sent = time.monotonic()
    worker.wait(STOP_TIMEOUT + EXIT_GRACE + SLACK + 30)  # a hang fails below with its real duration
    took = time.monotonic() - sent
    assert took <= STOP_TIMEOUT + EXIT_GRACE + SLACK, f"TERM -> exit took {took:.1f} s"
    [requeued] = [kiq.ext.loads(raw) for raw in r.lrange(f"queue:{QUEUE}", 0, -1)]
    assert requeued["jid"] == jid  # requeued by the hard shutdown: it runs again
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
