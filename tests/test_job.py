"""Job classes: options inherit and are checked, wire names, and the registry that payloads are resolved in."""

from __future__ import annotations

from typing import Any

import pytest

import kiq
from kiq.job_registry import JobRegistry
from kiq.plan import plan_of


class Base(kiq.Job, abstract=True):
    kiq_options = {"queue": "base", "retry": 3}


class Child(Base):
    kiq_options = {"retry": False, "track": True}

    def perform(self) -> None: ...


def test_options_inherit_and_merge() -> None:
    assert Child.get_options() == {"retry": False, "queue": "base", "track": True}
    assert "tests.test_job.Base" not in kiq.registry  # abstract bases are not registered


def test_default_wire_name_is_module_and_qualname() -> None:
    assert Child.kiq_name == "tests.test_job.Child"
    assert kiq.registry.get("tests.test_job.Child") is Child


def test_unknown_name_is_an_error_not_an_import() -> None:
    with pytest.raises(kiq.UnknownJobError, match=r"os\.system"):
        kiq.registry.get("os.system")


@pytest.mark.parametrize(
    "options",
    [{"queue": ""}, {"retry": -1}, {"retry": "yes"}, {"dead": "no"}, {"retry_for": 0}, {"tags": "a"}],
)
def test_bad_options_fail_at_class_definition(options: dict[str, Any]) -> None:
    with pytest.raises(kiq.ConfigError, match="option"):
        type("Bad", (kiq.Job,), {"kiq_options": options, "__module__": __name__})
    with pytest.raises(kiq.ConfigError, match="option"):
        Child.set(**options)


def test_two_jobs_cannot_share_a_wire_name() -> None:
    registry = JobRegistry()

    class One(kiq.Job, abstract=True):
        kiq_name = "Shared"

    class Two(kiq.Job, abstract=True):
        kiq_name = "Shared"

    registry.register(One)
    registry.register(One)  # the same class again is fine
    with pytest.raises(kiq.RegistryError, match="Shared"):
        registry.register(Two)


def test_redefining_the_same_class_replaces_it() -> None:
    registry = JobRegistry()
    first = type("Again", (kiq.Job,), {"__module__": "m", "kiq_name": "m.Again"})
    second = type("Again", (kiq.Job,), {"__module__": "m", "kiq_name": "m.Again"})
    registry.register(first)
    registry.register(second)
    assert registry.get("m.Again") is second
    kiq.registry.unregister("m.Again")


def test_setter_chains_options(config: kiq.Config) -> None:
    setter = Child.set(queue="a").set(retry=2)
    assert setter.options == {"queue": "a", "retry": 2}
    jid = setter.perform_async()
    assert jid is not None and config.redis.llen("queue:a") == 1


@pytest.mark.parametrize(
    ("options", "where"),
    [
        ({"foo": float("nan")}, "options['foo'] = nan is not a finite number"),
        ({"foo": object()}, "options['foo'] = <object object"),
        ({"meta": {"ids": (1, 2)}}, "options['meta']['ids'] = (1, 2) is a tuple"),
        ({"who": "x\udc80"}, "options['who'] = 'x\\udc80' is not UTF-8 text"),
    ],
)
def test_options_that_are_not_native_json_fail_where_they_are_written(options: dict[str, Any], where: str) -> None:
    with pytest.raises(kiq.JobArgumentError) as at_definition:
        type("Bad", (kiq.Job,), {"kiq_options": options, "__module__": __name__})
    with pytest.raises(kiq.JobArgumentError) as at_set:
        Child.set(**options)
    with pytest.raises(kiq.JobArgumentError) as at_decoration:
        kiq.job(**options)(lambda: None)
    for raised in (at_definition, at_set, at_decoration):
        assert where in str(raised.value)
    assert "tests.test_job.Bad" not in kiq.registry


@pytest.mark.parametrize("seconds", [float("inf"), float("nan")])
def test_retry_for_must_be_finite(seconds: float) -> None:
    with pytest.raises(kiq.ConfigError, match="option 'retry_for' must be seconds > 0"):
        Child.set(retry_for=seconds)


def test_an_async_perform_makes_an_async_job_and_a_generator_is_refused() -> None:
    class AsyncJob(kiq.Job):
        async def perform(self, x: int) -> None: ...

    async def fetch_feed(url: str) -> None: ...

    assert plan_of(AsyncJob).is_async and plan_of(kiq.job(fetch_feed).job_class).is_async
    assert not plan_of(Child).is_async
    arity = plan_of(AsyncJob).arity
    assert arity is not None and arity.counts == range(1, 2)  # pushes are checked too

    with pytest.raises(kiq.ConfigError, match=r"StreamJob\.perform is a generator function"):

        class StreamJob(kiq.Job):
            async def perform(self) -> Any:
                yield 1

    async def stream_feed(url: str) -> Any:
        yield url

    def pages(url: str) -> Any:
        yield url

    for function in (stream_feed, pages):
        with pytest.raises(kiq.ConfigError, match=rf"@kiq\.job .*{function.__name__} is a generator function"):
            kiq.job(queue="feeds")(function)
    assert not [name for name in kiq.registry.names() if name.endswith(("StreamJob", "stream_feed", "pages"))]
    kiq.registry.unregister(AsyncJob.kiq_name)
