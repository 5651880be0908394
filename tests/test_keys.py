"""kiq.ext.Keyspace: the keys of each layout, and that the keys of one queue share a slot whatever its name."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

import kiq
import kiq.ext
from kiq.keys import Keyspace


def slot(key: str) -> int:
    return key_slot(key.encode("utf-8", "surrogateescape"))


def test_a_standalone_server_keeps_sidekiqs_names() -> None:
    keys = kiq.ext.keyspace(object())  # a client kiq did not make for a cluster
    assert (keys.key("retry"), keys.queue("default"), keys.beside_queue("default", "kiq:working:x")) == (
        "retry",
        "queue:default",
        "kiq:working:x",
    )
    assert keys.queue_name("queue:default") == "default" and not keys.cluster


@pytest.mark.parametrize("name", ["default", "a}b", "{x}", "x{y", "ünï", "bad\udcff", "a b:c"])
def test_every_key_of_a_queue_falls_in_its_slot_and_the_name_reads_back(name: str) -> None:
    for layout in ("one", "queue"):
        keys = Keyspace(layout)  # type: ignore[arg-type]
        queue, beside = keys.queue(name), keys.beside_queue(name, "kiq:working:host:1:ab:default")
        assert slot(queue) == slot(beside), (layout, queue, beside)
        assert keys.queue_name(queue) == name
    shared = Keyspace("one")
    assert {slot(shared.queue(name)), slot(shared.key("retry"))} == {slot("{kiq}")}


@pytest.mark.parametrize("name", ["", "}x"])
def test_a_queue_name_with_no_tag_is_refused_in_the_queue_layout_naming_the_fix(name: str) -> None:
    with pytest.raises(ValueError, match="rename the queue"):
        Keyspace("queue").queue(name)
    assert Keyspace("one").queue(name) == "{kiq}queue:" + name  # one slot for everything: any name works


def test_slot_groups_cut_only_the_queue_layout() -> None:
    names = ["a", "b", "c"]
    one, per_queue = Keyspace("one"), Keyspace("queue")
    assert one.slot_groups([one.queue(n) for n in names]) == [[one.queue(n) for n in names]]
    assert per_queue.slot_groups([per_queue.queue(n) for n in names]) == [[per_queue.queue(n)] for n in names]
    assert per_queue.slot_groups([]) == []


def test_an_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="slots must be one of one, queue"):
        Keyspace("many")  # type: ignore[arg-type]


def test_a_cluster_url_with_a_database_or_a_bad_node_is_refused() -> None:
    for url, message in (
        ("redis+cluster://127.0.0.1:7000/2", "only database 0"),
        ("redis+cluster://127.0.0.1", "host:port"),
    ):
        with pytest.raises(kiq.ConfigError, match=message):
            assert kiq.Config(redis_url=url).redis is None  # never reached: connecting raises
