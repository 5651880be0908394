"""The batch plugin's dashboard tab, called as the dashboard calls it (the ``kiq_web_tabs`` hook, then
``tab.render``) on a real Redis, batches run by the real Processor: the newest batches a page at a time from the index
(expired ones left out and dropped from it), one batch in full (its counts those of ``status``), 404 for unknown and
malformed bids, text handed back as it is, Redis away raises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.plugins.batch import Batch, status
from kiq.plugins.batch.keys import INDEX, batch_key
from kiq.tabs import Facts, Link, Pager, Table, TabView, When
from tests.jobs.batch import FAIL, Callback, Dies, Noop
from tests.support import render_tab

from .conftest import drain

COLUMNS = ["Batch", "Description", "State", "Total", "Pending", "Failures", "Dead", "Created"]


def render(config: kiq.Config, path: str = "", **query: str) -> TabView:
    return render_tab(config, "batches", "Batches", path, **query)


def table(view: TabView, index: int = 0) -> Table:
    return [block for block in view.blocks if isinstance(block, Table)][index]


def pager(view: TabView) -> Pager:
    (found,) = [block for block in view.blocks if isinstance(block, Pager)]
    return found


def facts(view: TabView) -> dict[str, Any]:
    (found,) = [block for block in view.blocks if isinstance(block, Facts)]
    return dict(found.items)


def test_the_newest_batches_a_page_at_a_time(config: kiq.Config, r: redis.Redis) -> None:
    made = []
    for number in range(27):
        with Batch(f"batch {number}") as batch:
            Noop.perform_async(number)
        made.append(batch.bid)
    drain(config)
    with Batch("running") as running:
        Noop.set(queue="elsewhere").perform_async()
        Noop.set(queue="elsewhere").perform_async()

    first = render(config)
    assert first.title == "Batches" and list(table(first).columns) == COLUMNS
    assert [row[0] for row in table(first).rows] == [Link(bid, bid) for bid in [running.bid, *made[:-25:-1]]]
    assert pager(first) == Pager(1, True)
    state = status(running.bid, config)
    assert state is not None
    assert table(first).rows[0] == [
        Link(running.bid, running.bid), "running", "running", 2, 2, 0, 0, When(state.created_at)
    ]  # fmt: skip
    assert table(first).rows[1][1:7] == ["batch 26", "success", 1, 0, 0, 0]

    second = render(config, page="2")
    assert [row[0] for row in table(second).rows] == [Link(bid, bid) for bid in made[2::-1]]
    assert pager(second) == Pager(2, False)

    r.delete(batch_key(kiq.ext.keyspace(r), made[1]))  # expired
    second = render(config, page="2")
    assert [row[1] for row in table(second).rows] == ["batch 2", "batch 0"]
    assert made[1] not in r.zrange(INDEX, 0, -1)  # and dropped from the index
    assert table(render(config, page="3")).rows == [] and pager(render(config, page="3")) == Pager(3, False)


def test_one_batch_in_full(config: kiq.Config, r: redis.Redis) -> None:
    r.set(FAIL, 1)
    with Batch("parent", on_complete=Callback, on_death=Callback) as parent:
        Noop.perform_async()
        Dies.perform_async()
        with Batch("child") as child:
            Noop.perform_async()
    drain(config)
    found = status(parent.bid, config)
    assert found is not None and found.death_at is not None

    view = render(config, parent.bid)
    assert view.title == f"Batch {parent.bid}"
    shown = facts(view)
    assert shown == {
        "Batch": parent.bid,
        "Description": "parent",
        "State": "complete",
        "Total": found.total,
        "Pending": found.pending,
        "Failures": found.failures,
        "Dead": found.dead,
        "Open blocks": 0,
        "Created": When(found.created_at),
        "Complete": When(found.complete_at),
        "First death": When(found.death_at),
        "Parent": "none",
    }
    assert (found.total, found.pending, found.failures, found.dead) == (2, 1, 1, 1)
    assert table(view, 0).rows == [[Link(child.bid, child.bid), "success"]]
    assert table(view, 1).rows == [["complete", "BatchCallback"], ["death", "BatchCallback"]]
    child_view = render(config, child.bid)
    assert facts(child_view)["Parent"] == Link(parent.bid, parent.bid)
    assert table(child_view, 0).rows == [] and table(child_view, 1).rows == []


@pytest.mark.parametrize("path", ["no-such-batch", "not a bid", "a/b", "x" * 65, "../kiq:batches"])
def test_unknown_or_malformed_bids_are_not_found(config: kiq.Config, path: str) -> None:
    with Batch("there") as batch:
        Noop.perform_async()
    assert facts(render(config, batch.bid))["Description"] == "there"
    with pytest.raises(LookupError):
        render(config, path)


def test_markup_nul_and_lone_surrogates_come_back_as_plain_text(config: kiq.Config) -> None:
    description = "<script>alert(1)</script>\x00 caf\udce9"
    with Batch(description) as batch:
        Noop.perform_async()
    assert table(render(config)).rows[0][1] == description
    assert facts(render(config, batch.bid))["Description"] == description


def test_redis_away_raises(tmp_path: Path) -> None:
    config = kiq.Config(redis_url=f"unix://{tmp_path / 'no-redis.sock'}", plugins=["batch"])
    for path in ("", "a" * 22):
        with pytest.raises(redis.ConnectionError):
            render(config, path)
