"""The loop-lag watchdog: an async job that blocks its event loop is named, with the blocking stack, while it
blocks (kiq.server.loop_watchdog)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import kiq
from kiq.payload import dumps, new_jid, parse_payload
from kiq.server.aio import EventLoop
from tests.support import Unit, run_on_event_loop, wait_until

started: list[float] = []  # when each Blocker began blocking (time.time, the clock of log records)


class Blocker(kiq.Job):
    """An async job that blocks its loop with a synchronous sleep: the mistake the watchdog reports."""

    kiq_name = "tests.Blocker"

    async def perform(self, seconds: float) -> None:
        started.append(time.time())
        time.sleep(seconds)


def blocker(seconds: float) -> tuple[str, str]:
    jid = new_jid()
    return jid, dumps({"class": "tests.Blocker", "args": [seconds], "jid": jid, "queue": "default", "retry": 0})


def watchdog_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if "event loop" in record.getMessage()]


def test_a_blocked_loop_is_reported_while_it_blocks(config: kiq.Config, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kiq")
    started.clear()
    jid, payload = blocker(6)  # the case: a 6 s block
    loop = EventLoop(config, "test-loop", 10)
    loop.start()
    unit = Unit(payload)
    try:
        assert loop.hand_off(unit, parse_payload(payload), Blocker, threading.Event())
        wait_until(lambda: len(watchdog_records(caplog)) == 2, 30, message="the warning, then the loop running again")
        wait_until(lambda: not loop.slots and unit.acked == 1, 30, message="the job to end, acknowledged")
    finally:
        loop.close(5)

    (warning, unblocked) = watchdog_records(caplog)
    assert warning.levelname == "WARNING" and unblocked.levelname == "INFO"
    message = warning.getMessage()
    assert f"tests.Blocker jid={jid}" in message and "async_block_warning = 1" in message
    assert "time.sleep(seconds)" in message and "in perform" in message  # the blocking frame, from the loop thread
    # during the block: after about the threshold (1 s), within 2 s of the block's start, long before its end (6 s)
    assert started[0] + 0.75 <= warning.created <= started[0] + 2
    assert "runs again, after at least" in unblocked.getMessage() and unblocked.created >= started[0] + 6


def test_zero_turns_the_watchdog_off(config: kiq.Config, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kiq")
    config.async_block_warning = 0
    threads_before = {thread.name for thread in threading.enumerate()}
    _, payload = blocker(1.3)
    (unit,) = run_on_event_loop(config, [payload])
    assert unit.acked == 1
    assert watchdog_records(caplog) == []
    assert not any(name.endswith("-watchdog") for name in {t.name for t in threading.enumerate()} - threads_before)


def test_a_bad_value_is_refused() -> None:
    with pytest.raises(kiq.ConfigError, match="async_block_warning"):
        kiq.Config(async_block_warning=-1)
