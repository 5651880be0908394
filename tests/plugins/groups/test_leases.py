"""Slots are leases: one whose holder stops renewing it (a process killed, with basic fetch too) comes back after
the lease; one renewed by its holder's heartbeat stays; and a queue's keys never collide with another's."""

from __future__ import annotations

import time

import pytest

import kiq
import kiq.ext
from kiq.connection import DedicatedConnection
from tests.jobs.groups import Sleeps


def test_a_slot_comes_back_after_its_lease_unless_renewed(config: kiq.Config) -> None:
    config.add_plugin("groups")
    config.heartbeat_interval = 0.1  # a lease of 1 s (three heartbeats, at least a second)
    Sleeps.set(group="g").perform_bulk([[1]] * 4)
    group = kiq.Queue("default").group("g")
    group.concurrency = 1
    source = kiq.ext.Capsule("default", [("default", 0)], 5, config).job_source()
    assert source is not None
    connection = DedicatedConnection(config.redis)
    try:
        assert len(source.pop(connection, ["default"], 5)) == 1  # the limit: one
        assert source.pop(connection, ["default"], 5) == [] and group.running == 1
        for _ in range(3):  # renewed by the heartbeat: held past its first lease
            time.sleep(0.5)
            source.leases.renew()
        assert source.pop(connection, ["default"], 5) == [] and group.running == 1
        time.sleep(1.2)  # no renewal (its holder died): the next fetch frees it and takes the next job
        assert len(source.pop(connection, ["default"], 5)) == 1
        assert group.running == 1 and group.size == 2
    finally:
        connection.release()


@pytest.mark.parametrize("slots", [None, "one", "queue"])
def test_queue_scoped_keys_name_their_queue_unambiguously(slots: kiq.keys.Slots | None) -> None:
    keys = kiq.ext.Keyspace(slots)
    assert keys.queue_scoped("kiq:groups:", "a") + "j:b:c" != keys.queue_scoped("kiq:groups:", "a:b") + "j:c"
    assert keys.queue_scoped("kiq:groups:", "a}b") != keys.queue_scoped("kiq:groups:", "a")
    if slots is None:
        assert keys.queue_scoped("kiq:groups:", "default") == "kiq:groups:7:default:"
