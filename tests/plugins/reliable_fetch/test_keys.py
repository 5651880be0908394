"""The reliable fetcher's keys in each layout: Sidekiq-style names on a standalone server (what the docs promise to
operators), ``{kiq}`` names with ``slots = "one"``, lists beside their queue with ``slots = "queue"``; recovery reads
back what it finds with SCAN, and each script's KEYS fall in one slot."""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest
from redis.crc import key_slot

import kiq
import kiq.ext
from kiq.plugins.reliable_fetch import scripts
from kiq.plugins.reliable_fetch.keys import (
    WORKING_PREFIX,
    JobList,
    alive_key,
    list_pattern,
    owner_of,
    parse_list,
    recovering_key,
    working_key,
)

LAYOUTS = [kiq.ext.Keyspace(), kiq.ext.Keyspace("one"), kiq.ext.Keyspace("queue")]
IDS = ["standalone", "one", "queue"]


def test_standalone_names_are_unchanged() -> None:
    keys = kiq.ext.Keyspace()
    assert (
        JobList.beside(keys, working_key("host:1:abc", "default"), "low").key(keys) == "kiq:working:host:1:abc:default"
    )
    assert JobList.beside(keys, recovering_key("host:1:abc"), "low").key(keys) == "kiq:recovering:host:1:abc"
    assert keys.key(alive_key("host:1:abc")) == "kiq:alive:host:1:abc"
    assert working_key("host:1:abc", "a:b") == "kiq:working:host:1:abc:a_b"  # the owner stays readable


@pytest.mark.parametrize("keys", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("queue", ["low", "a{b}c", "with:colon"])
def test_recovery_reads_back_the_lists_it_finds(keys: kiq.ext.Keyspace, queue: str) -> None:
    job_list = JobList.beside(keys, working_key("host:1:abc", "serial{x}"), queue)
    key = job_list.key(keys)
    assert fnmatchcase(key, list_pattern(keys, WORKING_PREFIX))
    assert parse_list(keys, key) == job_list
    assert owner_of(job_list.name) == "host:1:abc"
    if keys.slots == "queue":  # beside its queue: a script can move jobs between them
        assert job_list.queue == queue and key_slot(key.encode()) == key_slot(keys.queue(queue).encode())
    else:  # one list for every queue, in kiq's shared slot (cluster) or plain (standalone)
        assert job_list.queue is None and key == keys.key(job_list.name)


@pytest.mark.parametrize("keys", LAYOUTS[1:], ids=IDS[1:])
def test_every_script_takes_keys_of_one_slot(keys: kiq.ext.Keyspace) -> None:
    calls = [
        scripts.FETCH.keys(keys, working_key("h:1:a", "default"), ["a", "b"] if keys.slots == "one" else ["a"]),
        scripts.ALIVE.keys(keys, "h:1:a"),
        scripts.REQUEUE.keys(keys, recovering_key("h:1:a"), "low"),
        scripts.CLAIM.keys(keys, working_key("h:2:b", "default"), recovering_key("h:1:a"), "low", "h:2:b", "h:1:a"),
        scripts.LEASE.keys(keys, "h:1:a"),
    ]
    for call in calls:
        assert len({key_slot(key.encode()) for key in call}) == 1, call
