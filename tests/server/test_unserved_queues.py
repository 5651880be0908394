"""A worker warns at start, once per class, about registered jobs whose queue none of its capsules serves."""

from __future__ import annotations

import logging

import pytest

import kiq
from kiq.fetcher import Capsule
from kiq.job_registry import JobRegistry
from kiq.server.launcher import Launcher
from kiq.server.unserved_queues import warn_about_unserved_queues


class Feeds(kiq.Job, abstract=True):  # registered by the tests, in a registry of their own
    kiq_name = "tests.unserved.Feeds"
    kiq_options = {"queue": "feeds"}


class Imports(kiq.Job, abstract=True):
    kiq_name = "tests.unserved.Imports"
    kiq_options = {"queue": "imports"}


class Mail(kiq.Job, abstract=True):
    kiq_name = "tests.unserved.Mail"


class Nowhere(kiq.Job):  # in the worker's registry, on a queue no test worker serves
    kiq_name = "tests.unserved.Nowhere"
    kiq_options = {"queue": "unserved-by-any-test"}


def test_one_warning_per_class_whose_queue_no_capsule_serves(
    config: kiq.Config, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = JobRegistry()
    for job_class in (Feeds, Imports, Mail, Feeds):  # registered twice: still one warning
        jobs.register(job_class)
    capsules = [Capsule("default", [("default", 0)], 1, config), Capsule("bulk", [("imports", 1)], 1, config)]
    with caplog.at_level(logging.WARNING, logger="kiq"):
        assert warn_about_unserved_queues(capsules, jobs) == ["tests.unserved.Feeds"]
    (record,) = caplog.records
    message = record.getMessage()
    assert record.levelname == "WARNING" and "tests.unserved.Feeds" in message and "'feeds'" in message
    assert "its queues: default, imports" in message and "-q feeds" in message


def test_a_worker_warns_at_start(config: kiq.Config, caplog: pytest.LogCaptureFixture) -> None:
    launcher = Launcher(config)
    with caplog.at_level(logging.WARNING, logger="kiq"):
        launcher.run()
    launcher.stop()
    warned = [record.getMessage() for record in caplog.records if "tests.unserved.Nowhere" in record.getMessage()]
    assert len(warned) == 1 and "'unserved-by-any-test'" in warned[0]
