"""A property of the iteration engine, driven in-process against a real Redis: whatever mix of interruptions
(the worker stopping), cancellations, errors and crashes (kill -9: the state as of the last save) hits a walk, the
items processed cover the enumerator (up to the cancellation, when there is one) and what ran twice is the item
that raised, or the items a crash lost since the last save: never more than one flush window each."""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import Any

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiq
from kiq.payload import new_jid

KINDS = ("interrupt", "cancel", "raise", "crash")
NEVER = 3600.0  # a flush interval no example reaches: saves only at interruptions and errors


class Boom(Exception):
    pass


class Crash(BaseException):
    """Stands for a kill -9: the test puts back the state as it was saved before the crashed item."""


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    count=st.integers(1, 40),
    events=st.dictionaries(st.integers(0, 39), st.sampled_from(KINDS), max_size=6),
    interval=st.sampled_from([0.0, NEVER]),
)
def test_processed_items_cover_the_walk_and_repeats_stay_within_a_flush_window(
    config: kiq.Config, r: redis.Redis, count: int, events: dict[int, str], interval: float
) -> None:
    jid = new_jid()
    key = f"it-{jid}"
    stopping = threading.Event()
    processed: Counter[int] = Counter()
    fired: dict[int, str] = {}
    snapshot: list[dict[str, str]] = []

    class Walk(kiq.IterableJob, abstract=True):
        iteration_flush_interval = interval

        def build_enumerator(self, *, cursor: Any) -> Any:
            return ((item, item) for item in range(cursor or 0, count))

        def each_iteration(self, item: int) -> None:
            processed[item] += 1
            kind = events.get(item)
            if kind is None or item in fired:
                return
            fired[item] = kind
            if kind == "interrupt":
                stopping.set()
            elif kind == "cancel":
                kiq.cancel(jid)
            elif kind == "raise":
                raise Boom(item)
            else:
                snapshot.append(r.hgetall(key))
                raise Crash(item)

    lost: list[int] = []  # per crash: the items run since the last save (they run again)
    for _ in range(len(events) + 2):
        stopping.clear()
        job = Walk()
        job.jid = jid
        job.job = {"class": "Walk", "jid": jid, "args": [], "queue": "default"}
        job.interrupt_when(stopping)
        try:
            job.perform()
            break
        except (kiq.Interrupted, Boom):
            continue
        except Crash as crash:
            saved = snapshot.pop()
            r.delete(key)
            if saved:
                r.hset(key, mapping=saved)
            resume_at = json.loads(saved["c"]) if saved.get("c") else 0
            lost.append(crash.args[0] + 1 - (resume_at or 0))
    else:
        raise AssertionError(f"the walk did not end: {fired}")

    assert not r.exists(key)  # completed (or cancelled): the state is gone
    cancels = sorted(item for item, kind in fired.items() if kind == "cancel")
    if cancels:  # a prefix, reaching at least the item during which the job was cancelled
        assert sorted(processed) == list(range(max(processed) + 1)) and max(processed) >= cancels[0]
    else:
        assert sorted(processed) == list(range(count))
    repeats = sum(processed.values()) - len(processed)
    raises = sum(kind == "raise" for kind in fired.values())
    assert all(items >= 1 for items in lost)
    if interval == 0.0:  # a save before every item: a crash loses only the item it hit
        assert all(items == 1 for items in lost)
    if cancels:
        assert repeats <= raises + sum(lost)
    else:
        assert repeats == raises + sum(lost)
