"""BasicFetch: BRPOP over the capsule's queues in Sidekiq's strict / random / weighted orders; requeue to the
end BRPOP takes from; and the ``fetch`` setting choosing the fetcher."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis

import kiq
from kiq.errors import ConfigError
from kiq.fetch import BasicFetch, BasicUnitOfWork, fetcher_for
from kiq.manager import Capsule


def capsule(config: kiq.Config, *queues: tuple[str, int]) -> Capsule:
    return Capsule("default", list(queues), 1, config, "test:1:abc")


def first_keys(fetch: BasicFetch, times: int = 4000) -> Counter[str]:
    return Counter(fetch.queue_keys()[0] for _ in range(times))


def test_strict_order_fetches_from_the_first_queue_first(config: kiq.Config, r: redis.Redis) -> None:
    r.lpush("queue:low", "low-1")
    r.lpush("queue:high", "high-1", "high-2")
    fetch = BasicFetch(capsule(config, ("high", 0), ("low", 0)))
    assert fetch.queue_keys() == ["queue:high", "queue:low"]
    fetched = [fetch.retrieve_work() for _ in range(3)]
    assert [(u.queue_name, u.job) for u in fetched if u] == [("high", "high-1"), ("high", "high-2"), ("low", "low-1")]


def test_strict_order_lists_a_repeated_queue_once(config: kiq.Config) -> None:
    fetch = BasicFetch(capsule(config, ("a", 0), ("b", 0), ("a", 0)))
    assert fetch.queue_keys() == ["queue:a", "queue:b"]


def test_weighted_order_puts_a_queue_first_in_proportion_to_its_weight(config: kiq.Config) -> None:
    fetch = BasicFetch(capsule(config, ("high", 3), ("low", 1)))
    counts = first_keys(fetch)
    assert 0.70 < counts["queue:high"] / 4000 < 0.80  # 3 of 4 expected; ~0.7% standard deviation
    assert sorted(fetch.queue_keys()) == ["queue:high", "queue:low"]  # every queue, each once


def test_weighted_mode_counts_a_queue_without_weight_once(config: kiq.Config) -> None:
    fetch = BasicFetch(capsule(config, ("a", 2), ("b", 0)))
    assert capsule(config, ("a", 2), ("b", 0)).mode == "weighted"
    assert 0.60 < first_keys(fetch)["queue:a"] / 4000 < 0.73  # 2 of 3


def test_random_order_when_all_weights_are_one(config: kiq.Config) -> None:
    fetch = BasicFetch(capsule(config, ("a", 1), ("b", 1)))
    assert fetch.capsule.mode == "random"
    assert 0.44 < first_keys(fetch)["queue:a"] / 4000 < 0.56


def test_retrieve_work_returns_none_when_the_queues_stay_empty(config: kiq.Config) -> None:
    assert BasicFetch(capsule(config, ("empty", 0))).retrieve_work() is None


def test_bulk_requeue_puts_jobs_back_where_they_are_fetched_next(config: kiq.Config, r: redis.Redis) -> None:
    r.lpush("queue:default", "older")
    fetch = BasicFetch(capsule(config, ("default", 0), ("other", 0)))
    units: list[Any] = [BasicUnitOfWork("default", "a", fetch), BasicUnitOfWork("other", "b", fetch)]
    fetch.bulk_requeue(units)
    assert r.lrange("queue:other", 0, -1) == ["b"]
    unit = fetch.retrieve_work()
    assert unit is not None and unit.job == "a"  # before "older", which waited in the queue


def test_requeue_of_one_unit(config: kiq.Config, r: redis.Redis) -> None:
    r.lpush("queue:default", "job")
    unit = BasicFetch(capsule(config, ("default", 0))).retrieve_work()
    assert unit is not None and r.llen("queue:default") == 0
    unit.acknowledge()  # nothing to do for BRPOP
    unit.requeue()
    assert r.lrange("queue:default", 0, -1) == ["job"]


def test_a_capsule_needs_queues(config: kiq.Config) -> None:
    with pytest.raises(ConfigError, match="no queues"):
        BasicFetch(capsule(config))


# -- choosing the fetcher ---------------------------------------------------------------------------------
class ListFetch:
    def __init__(self, capsule: Capsule) -> None:
        self.capsule = capsule

    def retrieve_work(self) -> None:
        return None

    def bulk_requeue(self, units: list[Any]) -> None:
        pass


class FetchPlugin:
    @kiq.hookimpl
    def kiq_fetcher(self, name: str, config: kiq.Config, capsule: Capsule) -> ListFetch | None:
        return ListFetch(capsule) if name == "mine" else None


def test_fetcher_for_basic(config: kiq.Config) -> None:
    assert type(fetcher_for(capsule(config, ("default", 0)))) is BasicFetch


def test_fetcher_for_module_and_class(config: kiq.Config) -> None:
    for path in ("tests.test_fetch:ListFetch", "tests.test_fetch.ListFetch"):
        config.fetch = path
        fetcher = fetcher_for(capsule(config, ("default", 0)))
        assert type(fetcher).__name__ == "ListFetch"


def test_fetcher_for_asks_the_plugins(config: kiq.Config) -> None:
    config.add_plugin(FetchPlugin())
    config.fetch = "mine"
    cap = capsule(config, ("default", 0))
    fetcher = fetcher_for(cap)
    assert isinstance(fetcher, ListFetch) and fetcher.capsule is cap


def test_fetcher_for_reliable_registers_the_shipped_plugin(config: kiq.Config) -> None:
    from kiq.plugins import reliable_fetch

    config.fetch = "reliable"
    fetcher = fetcher_for(capsule(config, ("default", 0)))
    assert config.plugins.is_registered(reliable_fetch)
    assert not isinstance(fetcher, BasicFetch)


def test_fetcher_for_unknown_names(config: kiq.Config) -> None:
    config.fetch = "nosuch"
    with pytest.raises(ConfigError, match="unknown fetch strategy 'nosuch'"):
        fetcher_for(capsule(config, ("default", 0)))
    config.fetch = "tests.test_fetch:Missing"
    with pytest.raises(ConfigError, match="cannot be loaded"):
        fetcher_for(capsule(config, ("default", 0)))
