"""The documented way to test a view that pushes inside ``transaction.atomic()``: a ``django.test.TestCase`` that
runs ``captureOnCommitCallbacks(execute=True)``. Run here through Django's and unittest's own machinery (the test
class set up, its transaction opened and rolled back as ``manage.py test`` would), on real Redis and in fake mode:
each deferred push happens exactly once, and the test finishes (it used to defer itself again forever)."""

from __future__ import annotations

import threading
import unittest
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
import kiq.testing
from kiq.contrib.django import apply_settings

pytest_plugins = ["tests.contrib.django_support"]

DEADLINE = 60.0  # seconds: a run still going then is the endless deferral


def run_test_case(check: Callable[[list[Any]], None], capture: bool = True) -> unittest.TestResult:
    """Run a ``django.test.TestCase`` whose test posts to the sign-up view (inside ``captureOnCommitCallbacks(
    execute=True)`` when ``capture``) and then calls ``check(callbacks)``; in a thread, so that a run that never
    ends fails this test instead of hanging it."""
    from django.db import connections
    from django.test import TestCase

    class SignupTest(TestCase):
        def test_signup(self) -> None:
            if capture:
                with self.captureOnCommitCallbacks(execute=True) as callbacks:
                    answer = self.client.post("/signup/", {"username": "ada"})
            else:
                answer = self.client.post("/signup/", {"username": "ada"})
                callbacks = []
            self.assertEqual(answer.status_code, 200)
            check(callbacks)

    result = unittest.TestResult()

    def run() -> None:
        try:
            unittest.defaultTestLoader.loadTestsFromTestCase(SignupTest).run(result)
        finally:
            connections.close_all()  # this thread's connections

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(DEADLINE)
    assert not runner.is_alive(), f"the TestCase did not finish in {DEADLINE} s: the push defers itself forever"
    assert result.testsRun == 1
    return result


def failures(result: unittest.TestResult) -> str:
    return "\n".join(text for _, text in [*result.errors, *result.failures])


@pytest.fixture
def django_config(config: kiq.Config, django_project: Path) -> kiq.Config:
    return apply_settings(config, keep={"redis_url"})


def queued_args(r: redis.Redis) -> list[list[Any]]:
    return [kiq.ext.loads(payload)["args"] for payload in reversed(r.lrange("queue:django", 0, -1))]


def test_capture_on_commit_callbacks_pushes_once_on_redis(django_config: kiq.Config, r: redis.Redis) -> None:
    seen: list[list[list[Any]]] = []

    def check(callbacks: list[Any]) -> None:
        assert len(callbacks) == 2  # the two deferred pushes, each run once
        seen.append(queued_args(r))

    result = run_test_case(check)
    assert result.wasSuccessful(), failures(result)
    assert seen == [[["ada-welcomed"], ["ada-nested"]]]  # pushed inside the test, while its transaction was open
    assert queued_args(r) == [["ada-welcomed"], ["ada-nested"]]  # and only once


def test_capture_on_commit_callbacks_pushes_once_in_fake_mode(django_config: kiq.Config, r: redis.Redis) -> None:
    seen: list[list[list[Any]]] = []

    def check(callbacks: list[Any]) -> None:
        seen.append([job["args"] for job in kiq.testing.jobs("django")])

    with kiq.testing.fake() as captured:
        result = run_test_case(check)
    assert result.wasSuccessful(), failures(result)
    assert seen == [[["ada-welcomed"], ["ada-nested"]]]
    assert [job["args"] for job in captured.jobs("django")] == [["ada-welcomed"], ["ada-nested"]]
    assert queued_args(r) == []  # nothing reached Redis


def test_without_capturing_a_test_case_never_pushes(django_config: kiq.Config, r: redis.Redis) -> None:
    """A TestCase's transaction rolls back at the end, never commits: what the docs say about it."""
    seen: list[list[list[Any]]] = []
    result = run_test_case(lambda callbacks: seen.append(queued_args(r)), capture=False)
    assert result.wasSuccessful(), failures(result)
    assert seen == [[]] and queued_args(r) == []
