"""What a push checks before anything is written: misspelt job options (kiq's and the ones plugins declare) and the
number of arguments ``perform`` takes."""

from __future__ import annotations

from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.errors import ConfigError, InvalidJobError


def pushed(r: redis.Redis, queue: str = "default") -> int:
    return int(r.llen(f"queue:{queue}"))


# -- options --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "meant"),
    [("queu", "queue"), ("retyr", "retry"), ("retry_qeue", "retry_queue"), ("backtrce", "backtrace"), ("ded", "dead")],
)
def test_a_misspelt_option_fails_where_the_class_is_defined(option: str, meant: str) -> None:
    with pytest.raises(ConfigError, match=rf"unknown job option '{option}' \(did you mean '{meant}'\?\)"):

        class Typo(kiq.Job):
            kiq_options = {option: "low"}

            def perform(self) -> None: ...


def test_an_option_nobody_declared_travels_in_the_payload(config: kiq.Config, r: redis.Redis) -> None:
    class Audited(kiq.Job):  # Sidekiq's rule: any option travels for middleware to read
        kiq_options = {"audit_level": "high"}

        def perform(self) -> None: ...

    Audited.set(config=config).perform_async()
    assert kiq.ext.loads(r.lindex("queue:default", 0))["audit_level"] == "high"


def test_a_misspelt_plugin_option_fails_at_push(config: kiq.Config, r: redis.Redis) -> None:
    class Declares:
        @kiq.hookimpl
        def kiq_job_options(self) -> list[str]:
            return ["priority_lane"]

    class Lane(kiq.Job):
        kiq_options = {"priority_lan": True}  # not a near miss of kiq's own options: accepted where defined

        def perform(self) -> None: ...

    Lane.set(config=config).perform_async()  # no plugin declared priority_lane yet
    config.add_plugin(Declares())
    with pytest.raises(ConfigError, match=r"unknown job option 'priority_lan' \(did you mean 'priority_lane'\?\)"):
        Lane.set(config=config).perform_async()
    with pytest.raises(ConfigError, match="did you mean 'priority_lane'"):
        Lane.set(config=config, priority_lan=False).perform_async()
    assert pushed(r) == 1


def test_the_tracking_plugin_declares_track(config: kiq.Config, r: redis.Redis) -> None:
    from kiq.plugins.tracking import TrackingPlugin

    config.add_plugin(TrackingPlugin)

    class Report(kiq.Job):
        def perform(self) -> None: ...

    with pytest.raises(ConfigError, match=r"'trak' \(did you mean 'track'\?\)"):
        Report.set(config=config, trak=True).perform_async()
    assert pushed(r) == 0


def test_a_plugin_must_declare_a_list_of_names(config: kiq.Config) -> None:
    class Bare:
        @kiq.hookimpl
        def kiq_job_options(self) -> Any:
            return "track"  # a string would declare t, r, a, c and k

    with pytest.raises(ConfigError, match="must return a list of option names"):
        config.add_plugin(Bare())


# -- arguments ------------------------------------------------------------------------------------------
class Add(kiq.Job):
    def perform(self, a: int, b: int) -> None: ...


class Greet(kiq.Job):
    def perform(self, name: str, greeting: str = "hello") -> None: ...


class Sum(kiq.Job):
    def perform(self, first: int, *rest: int) -> None: ...


class Loose(kiq.Job):
    kiq_options = {"check_args": False}

    def perform(self, *args: Any) -> None:
        (_only,) = args


@kiq.job
def multiply(a: int, b: int) -> int:
    return a * b


@pytest.mark.parametrize(
    ("job", "args", "message"),
    [
        (Add, [1], r"perform\(a, b\) takes 2 arguments, got 1"),
        (Add, [1, 2, 3], r"takes 2 arguments, got 3"),
        (Greet, [], r"perform\(name, greeting='hello'\) takes 1 or 2 arguments, got 0"),
        (Greet, ["a", "b", "c"], r"takes 1 or 2 arguments, got 3"),
        (Sum, [], r"perform\(first, \*rest\) takes at least 1 argument, got 0"),
        (multiply, [2], r"multiply\(a, b\) takes 2 arguments, got 1"),
    ],
)
def test_a_push_with_the_wrong_number_of_arguments_writes_nothing(
    config: kiq.Config, r: redis.Redis, job: Any, args: list[Any], message: str
) -> None:
    with pytest.raises(InvalidJobError, match=message + r"; nothing was pushed \(the option check_args=False"):
        job.set(config=config).perform_async(*args)
    with pytest.raises(InvalidJobError, match=message):
        job.set(config=config).perform_in(60, *args)
    assert pushed(r) == 0 and r.zcard("schedule") == 0


@pytest.mark.parametrize(
    ("job", "args"),
    [(Add, [1, 2]), (Greet, ["a"]), (Greet, ["a", "b"]), (Sum, [1]), (Sum, [1, 2, 3, 4]), (multiply, [2, 3])],
)
def test_a_push_with_a_fitting_number_of_arguments_goes_through(
    config: kiq.Config, r: redis.Redis, job: Any, args: list[Any]
) -> None:
    job.set(config=config).perform_async(*args)
    assert kiq.ext.loads(r.lindex("queue:default", 0))["args"] == args


def test_push_bulk_checks_every_job_before_any_is_written(config: kiq.Config, r: redis.Redis) -> None:
    client = kiq.Client(config)
    with pytest.raises(InvalidJobError, match=r"takes 2 arguments, got 1 in args\[2\]"):
        client.push_bulk({"class": Add, "args": [[1, 2], [3, 4], [5], [6, 7]]})
    assert pushed(r) == 0
    assert len(client.push_bulk({"class": Add, "args": [[1, 2], [3, 4]]})) == 2


def test_check_args_false_and_wire_names_are_not_checked(config: kiq.Config, r: redis.Redis) -> None:
    Loose.set(config=config).perform_async(1, 2, 3)  # the option turns it off for the class
    Add.set(config=config, check_args=False).perform_async(1)  # or for one push
    kiq.Client(config).push({"class": "HardJob", "args": [1, 2, 3]})  # a Ruby class: its arity is not known here
    assert pushed(r) == 3


def test_a_required_keyword_only_parameter_must_be_given_at_push(config: kiq.Config, r: redis.Redis) -> None:
    class Purge(kiq.Job):
        def perform(self, path: str, *, force: bool) -> None: ...

    with pytest.raises(InvalidJobError, match="missing a required argument: 'force'"):
        Purge.set(config=config).perform_async("/tmp")
    assert pushed(r) == 0
    Purge.set(config=config).perform_async("/tmp", force=True)
    assert pushed(r) == 1


def test_a_bad_option_is_refused_where_the_class_is_defined() -> None:
    with pytest.raises(ConfigError, match=r"check_args.*must be true or false"):

        class Strange(kiq.Job):
            kiq_options = {"check_args": "no"}

            def perform(self) -> None: ...
