"""``JobSet.search`` on a real Redis: a bounded window per call, in either score order, going on from its ``resume``
value until the end; entries sharing one score across the windows' edges are each found once; an entry added
behind the position reached does not disturb the rest; a malformed position is refused with a message."""

from __future__ import annotations

import json

import pytest

import kiq
import kiq.ext
from kiq.api import DeadSet, SearchResult
from kiq.errors import KiqError


def add(config: kiq.Config, scored: dict[str, float]) -> None:
    entries = {json.dumps({"class": "Fragile", "args": [text], "jid": text}): score for text, score in scored.items()}
    config.redis.zadd(kiq.ext.keyspace(config.redis).key("dead"), entries)


def search_all(dead: DeadSet, text: str, newest_first: bool, window: int, limit: int = 25) -> list[SearchResult]:
    results = [dead.search(text, newest_first, None, limit, window)]
    while results[-1].resume is not None:
        assert len(results) < 1000, "the search does not end"
        results.append(dead.search(text, newest_first, results[-1].resume, limit, window))
    return results


def jids(results: list[SearchResult]) -> list[str]:
    return [entry.jid or "" for result in results for entry in result.entries]


@pytest.mark.cluster
def test_a_search_looks_at_a_window_per_call_and_goes_on_to_the_end(config: kiq.Config) -> None:
    add(config, {f"needle-{i:03d}" if i % 10 == 3 else f"hay-{i:03d}": 1000.0 + i for i in range(100)})
    dead = DeadSet(config)
    results = search_all(dead, "needle", newest_first=True, window=30)
    assert [result.examined for result in results] == [30, 30, 30, 10]
    assert jids(results) == [f"needle-{i:03d}" for i in range(93, 0, -10)]
    assert [len(result.entries) for result in results] == [3, 3, 3, 1]
    oldest = search_all(dead, "needle", newest_first=False, window=30)
    assert jids(oldest) == [f"needle-{i:03d}" for i in range(3, 100, 10)]
    assert [entry.score for entry in oldest[0].entries] == [1003.0, 1013.0, 1023.0]

    # a page of matches stops the call at the last one: the next call goes on right after it
    paged = search_all(dead, "needle", newest_first=True, window=1000, limit=4)
    assert [len(result.entries) for result in paged] == [4, 4, 2]
    assert jids(paged) == jids(results) and paged[0].examined == 37  # 99 down to 63

    nothing = search_all(dead, "no such text *?[]", newest_first=True, window=1000)
    assert len(nothing) == 1 and nothing[0].entries == [] and nothing[0].examined == 100


@pytest.mark.cluster
def test_entries_sharing_a_score_across_windows_are_each_found_once(config: kiq.Config) -> None:
    add(config, {f"same-{i:02d}": 5.0 for i in range(23)} | {"before": 4.0, "after": 6.0})
    dead = DeadSet(config)
    for window in (1, 2, 7, 10, 24):
        for newest_first in (True, False):
            found = jids(search_all(dead, "", newest_first, window, limit=1000))
            assert sorted(found) == sorted(["before", "after", *(f"same-{i:02d}" for i in range(23))]), window
            assert len(found) == 25, (window, newest_first)
            assert found[0] == ("after" if newest_first else "before")


@pytest.mark.cluster
def test_an_entry_added_behind_the_position_reached_leaves_the_rest_alone(config: kiq.Config) -> None:
    add(config, {f"needle-{i}": float(i) for i in range(10)})
    dead = DeadSet(config)
    first = dead.search("needle", True, None, 25, 4)
    assert jids([first]) == ["needle-9", "needle-8", "needle-7", "needle-6"]
    add(config, {"needle-new": 100.0})  # a job that died meanwhile: newer than where the search is
    rest = search_all_from(dead, first.resume)
    assert jids(rest) == [f"needle-{i}" for i in range(5, -1, -1)]


def search_all_from(dead: DeadSet, resume: str | None) -> list[SearchResult]:
    results = []
    while resume is not None:
        results.append(dead.search("needle", True, resume, 25, 4))
        resume = results[-1].resume
    return results


@pytest.mark.parametrize("position", ["", "5", "five:0", "5:x", "5:-1", "nan-ish:3", "nan:3", "1:99999999999"])
def test_a_malformed_position_is_refused_naming_it(config: kiq.Config, position: str) -> None:
    with pytest.raises(KiqError, match="bad search position"):
        DeadSet(config).search("x", True, position)
