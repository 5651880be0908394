"""Jobs for tests/plugins/groups (a worker loads them with ``-r tests.jobs.groups`` and ``KIQ_PLUGINS=groups``).

Each run writes when it started and ended to Redis, where the test reads it back."""

from __future__ import annotations

import json
import os
import time

import kiq

STARTS = "groups-test:starts"  # LIST of JSON [group or null, label, start time]
SPANS = "groups-test:spans"  # LIST of JSON [group or null, start, end, label]


def _redis():  # type: ignore[no-untyped-def]
    return kiq.default_config().redis


class Sleeps(kiq.Job):
    """Sleeps ``ms`` milliseconds; ``label`` says which push it was."""

    kiq_name = "GroupsSleeps"

    def perform(self, ms: int, label: str = "") -> None:
        group = self.job.get("group")
        started = time.time()
        _redis().rpush(STARTS, json.dumps([group, label, started]))
        time.sleep(ms / 1000)
        _redis().rpush(SPANS, json.dumps([group, started, time.time(), label]))


class PerAccount(kiq.Job):
    """Grouped by its first argument, through a callable option."""

    kiq_name = "GroupsPerAccount"
    kiq_options = {"group": lambda account, *_rest, **_kwargs: f"account-{account}"}

    def perform(self, account: object, note: str = "") -> None:
        _redis().rpush(STARTS, json.dumps([self.job.get("group"), note, time.time()]))


class Quiet(kiq.Job):
    """Sleeps ``ms`` milliseconds, then appends its label to the file ``GROUPS_TEST_FILE`` names (no Redis: it runs
    the same while Redis is away)."""

    kiq_name = "GroupsQuiet"

    def perform(self, ms: int, label: str) -> None:
        time.sleep(ms / 1000)
        with open(os.environ["GROUPS_TEST_FILE"], "a") as done:
            done.write(f"{label}\n")
