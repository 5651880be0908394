"""A job class's plan (kiq.plan): what is found once, when the class is defined, for its pushes and its runs."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
import redis

import kiq
from kiq.plan import JobPlan, plan_of


class Sync(kiq.Job):
    kiq_name = "tests.plan.Sync"
    kiq_options = {"queue": "plans", "retry": 3}

    def perform(self, number: int, mode: str = "ok") -> None: ...


class Child(Sync):
    kiq_name = "tests.plan.Child"
    kiq_options = {"retry": False, "tags": ["child"]}

    def perform(self, sku: UUID) -> None: ...


class Awaited(kiq.Job):
    kiq_name = "tests.plan.Awaited"

    async def perform(self, url: str) -> None: ...


@kiq.job(queue="mail", name="tests.plan.send")
async def send(to: str, *, subject: str) -> None: ...


class Walk(kiq.IterableJob):
    kiq_name = "tests.plan.Walk"

    def build_enumerator(self, count: int, *, cursor: Any) -> Any:
        return ((index, index) for index in range(cursor or 0, count))

    def each_iteration(self, item: int, count: int) -> None: ...


class Timed(Walk):
    kiq_name = "tests.plan.Timed"

    def around_iteration(self) -> Iterator[None]:
        yield


def test_a_sync_class_plan_holds_its_options_its_arity_and_no_conversion() -> None:
    plan = plan_of(Sync)
    assert plan.options == {"retry": 3, "queue": "plans"} and plan.declared_options == {"queue": "plans", "retry": 3}
    assert plan.arity is not None and plan.arity.counts == range(1, 3)
    assert plan.arity.signature == "perform(number, mode='ok')"
    assert plan.arguments is None  # int and str are JSON already: its pushes and runs convert nothing
    assert (plan.is_async, plan.interruptible, plan.around_iteration) == (False, False, None)
    assert Sync.get_options() == {"retry": 3, "queue": "plans"} and Sync.get_options() is not plan.options


def test_an_async_class_and_an_async_function_job_are_async() -> None:
    assert plan_of(Awaited).is_async and plan_of(Awaited).options == {"retry": True, "queue": "default"}
    plan = plan_of(send.job_class)
    assert plan.is_async and plan.options == {"retry": True, "queue": "mail"}
    assert plan.arity is not None and list(plan.arity.parameters.parameters) == ["to", "subject"]  # no self to drop
    assert plan.arity.keywords_required


def test_an_iterable_job_is_interruptible_and_keeps_its_around_iteration() -> None:
    plan = plan_of(Walk)
    assert plan.interruptible and not plan.is_async and plan.around_iteration is None  # not overridden: no layer
    assert plan.arity is not None and plan.arity.counts == range(1, 2)  # build_enumerator's arguments, less cursor
    around = plan_of(Timed).around_iteration
    assert plan_of(Timed).interruptible and around is not None
    assert isinstance(around(Timed()), contextlib.AbstractContextManager)
    assert plan_of(kiq.IterableJob).interruptible


def test_a_subclass_has_its_own_plan_over_its_base() -> None:
    base, child = plan_of(Sync), plan_of(Child)
    assert child is not base
    assert child.options == {"retry": False, "queue": "plans", "tags": ["child"]}  # inherited, as sidekiq_options
    assert child.arity is not None and child.arity.counts == range(1, 2)  # its own perform's
    assert child.arguments is not None and base.arguments is None  # its UUID converts; the base's arguments do not
    assert base.options == {"retry": 3, "queue": "plans"}  # the base is unchanged


def test_a_push_follows_default_job_options_set_after_the_first_push(config: kiq.Config, r: redis.Redis) -> None:
    plan = plan_of(Sync)
    Sync.perform_async(1)
    config.default_job_options = {"backtrace": True, "retry": 5}
    Sync.perform_async(2)
    first, second = (json.loads(raw) for raw in reversed(r.lrange("queue:plans", 0, -1)))
    assert "backtrace" not in first and first["retry"] == 3
    assert second["backtrace"] is True and second["retry"] == 3  # the class's own options still win
    assert plan_of(Sync) is plan  # the class's plan is the same: the defaults are read at each push


def test_a_plan_is_frozen_and_a_class_kiq_does_not_know_has_the_empty_plan() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan_of(Sync).is_async = True  # type: ignore[misc]

    class NotAJob:
        pass

    assert plan_of(NotAJob) == JobPlan() and JobPlan().options == {} and JobPlan().arity is None
    assert plan_of(kiq.Job).options == {"retry": True, "queue": "default"}
