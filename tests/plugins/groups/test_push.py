"""Pushing grouped jobs: ``set(group=...)``, a class's group callable, bulk and asyncio pushes, the checks of a
group id at push, and where the jobs wait in Redis (their group's list, not ``queue:<name>``)."""

from __future__ import annotations

import asyncio

import pytest
import redis

import kiq
from kiq.plugins.groups import Group
from tests.jobs.groups import PerAccount, Sleeps


@pytest.fixture
def groups(config: kiq.Config) -> kiq.Config:
    config.add_plugin("groups")
    return config


def test_a_grouped_push_returns_its_jid_and_waits_in_its_group(groups: kiq.Config, r: redis.Redis) -> None:
    jid = Sleeps.set(group="acme").perform_async(1)
    assert isinstance(jid, str) and len(jid) == 24
    assert kiq.Queue("default").size == 0  # not where a Ruby worker or a plain fetch reads
    group = kiq.Queue("default").group("acme")
    assert isinstance(group, Group) and group.size == 1
    assert [q.name for q in kiq.Queue.all()] == ["default"]
    Sleeps.perform_async(1)  # ungrouped: the queue's list, as always
    assert kiq.Queue("default").size == 1 and group.size == 1


def test_a_group_callable_is_called_with_the_arguments(groups: kiq.Config) -> None:
    PerAccount.perform_async(7, "x")
    PerAccount.perform_bulk([[8], [8], [9]])
    assert [kiq.Queue("default").group(f"account-{n}").size for n in (7, 8, 9)] == [1, 2, 1]
    assert kiq.Queue("default").size == 0


def test_bulk_and_asyncio_pushes_go_to_their_groups(groups: kiq.Config) -> None:
    jids = Sleeps.set(group="bulk").perform_bulk([[1], [2], [3]])
    assert len(jids) == 3 and all(jids)

    async def push() -> str | None:
        return await Sleeps.set(group="aio").aio.perform_async(1)

    assert asyncio.run(push())
    assert kiq.Queue("default").group("bulk").size == 3
    assert kiq.Queue("default").group("aio").size == 1


@pytest.mark.parametrize("bad", ["", "x" * 257, "a\0b", 7, ["a"], {"a": 1}])
def test_a_bad_group_id_is_refused_naming_it_and_nothing_is_pushed(groups: kiq.Config, bad: object) -> None:
    with pytest.raises(kiq.InvalidJobError, match="job group must be a non-empty string"):
        Sleeps.set(group=bad).perform_async(1)
    assert kiq.Queue("default").size == 0


def test_a_callable_answering_no_group_id_is_refused(groups: kiq.Config) -> None:
    with pytest.raises(kiq.InvalidJobError, match="the group callable's answer"):
        PerAccount.set(group=lambda *args: 42).perform_async(1)
    with pytest.raises(kiq.InvalidJobError, match="raised ZeroDivisionError"):
        PerAccount.set(group=lambda *args: 1 / 0).perform_async(1)


def test_a_256_character_id_and_any_text_are_groups(groups: kiq.Config) -> None:
    for name in ("x" * 256, "tenant:{42}", "é ☃ \udcff"[:2]):
        Sleeps.set(group=name).perform_async(1)
        assert kiq.Queue("default").group(name).size == 1


def test_without_the_plugin_a_group_is_refused_by_the_api(config: kiq.Config) -> None:
    with pytest.raises(kiq.ConfigError, match="enable the groups plugin"):
        kiq.Queue("default").group("acme")
