"""A failed attempt is one WARNING line (class, jid, error, what happens next) with the job's own frames; kiq's
frames (processor, middleware, retry layer) only when the kiq logger is at DEBUG."""

from __future__ import annotations

import logging
import threading

import pytest

import kiq
from kiq.logging import KIQ_DIR
from kiq.payload import dumps, new_jid
from kiq.server.outcomes import RedisOutage
from kiq.server.processor import Processor
from tests.support import Unit


def parse_order(order: str) -> int:
    return int(order)  # ValueError: the job's own frame, two calls down


class ChargeOrder(kiq.Job):
    kiq_name = "tests.failure_log.ChargeOrder"

    def perform(self, order: str) -> None:
        parse_order(order)


class Audit(kiq.ServerMiddleware):
    """A middleware layer, so kiq's chain frames sit between the processor and perform."""

    def call(self, job_instance: object, job: dict[str, object], queue: str) -> kiq.Wrapper:
        yield


def fail_once(config: kiq.Config, caplog: pytest.LogCaptureFixture, level: int, retry: object) -> logging.LogRecord:
    config.server_middleware.add(Audit)
    jid = new_jid()
    unit = Unit(dumps({"class": ChargeOrder.kiq_name, "args": ["x"], "jid": jid, "queue": "default", "retry": retry}))
    processor = Processor(config, None, threading.Event(), RedisOutage(config), "t")  # type: ignore[arg-type]
    with caplog.at_level(level, logger="kiq"):
        processor.process(unit)
    assert unit.acked == 1
    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1, [record.getMessage() for record in warnings]
    assert warnings[0].getMessage().startswith(f"tests.failure_log.ChargeOrder jid={jid} failed: ValueError: ")
    return warnings[0]


def frames(record: logging.LogRecord) -> str:
    assert record.exc_info is not None
    return logging.Formatter().formatException(record.exc_info)


def test_a_retried_failure_is_one_line_with_only_the_jobs_frames(
    config: kiq.Config, caplog: pytest.LogCaptureFixture
) -> None:
    record = fail_once(config, caplog, logging.INFO, retry=3)
    assert "invalid literal for int()" in record.getMessage()
    assert record.getMessage().endswith(" s") and "; retry 1 of 3 in " in record.getMessage()
    shown = frames(record)
    assert "in perform" in shown and "in parse_order" in shown and "ValueError" in shown
    assert KIQ_DIR not in shown  # no processor, chain, retry or middleware frame of kiq's
    assert "in call" in shown  # the user's own middleware stays


def test_a_dead_job_says_so(config: kiq.Config, caplog: pytest.LogCaptureFixture) -> None:
    assert fail_once(config, caplog, logging.INFO, retry=0).getMessage().endswith("; dead")


def test_at_debug_kiqs_frames_are_shown_too(config: kiq.Config, caplog: pytest.LogCaptureFixture) -> None:
    shown = frames(fail_once(config, caplog, logging.DEBUG, retry=False))
    assert KIQ_DIR in shown and "in perform" in shown
