"""Push-time holes (issue 13): a lone surrogate, NaN/±inf, or any value that is not native JSON, in any field of
a payload, and a time that is not a finite number, are refused with an error naming them, and nothing is written
to Redis, however the job was pushed (one job, a bulk push with the bad job in its last batch, the poller)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

import kiq
from kiq.middleware import ClientMiddleware, Wrapper
from kiq.server.scheduled import Poller


class Refusable(kiq.Job):
    kiq_name = "Refusable"

    def perform(self, *args: Any) -> None: ...


def nothing_written(r: redis.Redis) -> bool:
    return r.dbsize() == 0


def assert_a_good_push_still_works(r: redis.Redis) -> None:
    """A positive control: the refusal above was about the value, not a client that writes nothing at all."""
    jid = Refusable.perform_async("fine")
    assert [json.loads(raw)["jid"] for raw in r.lrange("queue:default", 0, -1)] == [jid]


# -- lone surrogates ---------------------------------------------------------------------------------------
SURROGATES = ["\ud800", "\udcff"]  # a JSON escape without its pair; a byte that was not UTF-8, read as text


@pytest.mark.parametrize("surrogate", SURROGATES, ids=["escaped", "surrogateescape"])
def test_a_lone_surrogate_in_the_arguments_is_refused_by_path_and_value(r: redis.Redis, surrogate: str) -> None:
    with pytest.raises(kiq.JobArgumentError) as raised:
        Refusable.perform_async(1, {"k": f"a{surrogate}"})
    message = str(raised.value)
    assert f"args[1]['k'] = {f'a{surrogate}'!r} is not UTF-8 text" in message
    assert f"lone surrogate U+{ord(surrogate):04X} at index 1" in message
    with pytest.raises(kiq.JobArgumentError, match=r"args\[0\]\[0\] has the key"):
        Refusable.perform_async([{f"key{surrogate}": 1}])
    with pytest.raises(kiq.JobArgumentError, match=r"args\[0\] = "):
        Refusable.perform_in(60, surrogate)
    assert nothing_written(r)
    assert_a_good_push_still_works(r)


def test_a_lone_surrogate_in_any_other_field_is_refused(config: kiq.Config, r: redis.Redis) -> None:
    with pytest.raises(kiq.JobArgumentError, match=r"options\['note'\] = '\\ud800' is not UTF-8 text"):
        Refusable.set(note="\ud800")
    with pytest.raises(kiq.JobArgumentError, match=r"payload\['note'\] = '\\udc80' is not UTF-8 text"):
        kiq.Client(config).push({"class": Refusable, "args": [], "note": "\udc80"})
    with pytest.raises(kiq.JobArgumentError, match=r"payload has the key 'n\\udc80'"):
        kiq.Client(config).push({"class": "Ruby::Mailer", "args": [], "n\udc80": 1})

    class AddNote(ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Wrapper:
            job["note"] = {"by": "mw\udcff"}
            yield

    config.client_middleware.add(AddNote)
    with pytest.raises(kiq.JobArgumentError, match=r"payload\['note'\]\['by'\] = 'mw\\udcff'"):
        Refusable.perform_async(1)
    assert nothing_written(r)


# -- NaN, ±inf and other values that are not native JSON, in any field -------------------------------------
@pytest.mark.parametrize(
    ("value", "why"),
    [
        (float("nan"), " = nan is not a finite number"),
        (float("inf"), " = inf is not a finite number"),
        ({"nested": [float("-inf")]}, "['nested'][0] = -inf is not a finite number"),
        (object(), " = <object object at"),
        (("a", "b"), " = ('a', 'b') is a tuple, not a native JSON type; use a list"),
    ],
    ids=["nan", "inf", "nested-inf", "object", "tuple"],
)
def test_a_field_that_is_not_native_json_is_refused_wherever_it_came_from(
    config: kiq.Config, r: redis.Redis, value: Any, why: str
) -> None:
    with pytest.raises(kiq.JobArgumentError, match="options must be native JSON") as at_set:
        Refusable.set(foo=value)
    assert f"options['foo']{why}" in str(at_set.value)
    with pytest.raises(kiq.JobArgumentError, match="The payload of Refusable must be native JSON") as at_push:
        kiq.Client(config).push({"class": Refusable, "args": [1], "foo": value})
    assert f"payload['foo']{why}" in str(at_push.value)

    class AddField(ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Wrapper:
            job["foo"] = value
            yield

    config.client_middleware.add(AddField)
    with pytest.raises(kiq.JobArgumentError) as from_middleware:
        Refusable.perform_in(60, 1)
    assert f"payload['foo']{why}" in str(from_middleware.value)
    with pytest.raises(kiq.JobArgumentError):
        Refusable.perform_bulk([[1], [2]])
    assert nothing_written(r)


def test_kiq_options_that_are_not_native_json_fail_at_class_definition(r: redis.Redis) -> None:
    with pytest.raises(kiq.JobArgumentError, match=r"NaNJob: options must be native JSON .* options\['limit'\] = nan"):

        class NaNJob(kiq.Job):
            kiq_options = {"limit": float("nan")}

            def perform(self) -> None: ...

    assert "tests.test_push_refusals.NaNJob" not in kiq.registry
    assert nothing_written(r)


def test_a_refusal_is_raised_at_each_middleware_yield_and_what_is_written_is_what_was_checked(
    config: kiq.Config, r: redis.Redis
) -> None:
    seen: list[BaseException] = []

    class Observe(ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Wrapper:
            try:
                yield
            except Exception as exc:
                seen.append(exc)
                raise
            job["late"] = float("nan")  # after the yield: checked and encoded already, so not written

    config.client_middleware.add(Observe)
    with pytest.raises(kiq.JobArgumentError):
        Refusable.perform_async("\ud800")  # found by the encoder, inside the chain
    assert [type(exc) for exc in seen] == [kiq.JobArgumentError]
    assert nothing_written(r)
    Refusable.perform_async(1)
    (raw,) = r.lrange("queue:default", 0, -1)
    assert "late" not in json.loads(raw)


# -- times ---------------------------------------------------------------------------------------------------
BAD_TIMES = [float("nan"), float("inf"), float("-inf"), True, "60", None]


@pytest.mark.parametrize("when", BAD_TIMES, ids=repr)
def test_a_time_that_is_not_a_finite_number_is_refused(config: kiq.Config, r: redis.Redis, when: Any) -> None:
    shown = repr(when)
    with pytest.raises(kiq.errors.InvalidJobError, match=f"perform_in's interval .*got {shown}"):
        Refusable.perform_in(when, 1)
    with pytest.raises(ValueError, match=f"perform_at's timestamp .*got {shown}"):
        Refusable.set(queue="low").perform_at(when, 1)
    with pytest.raises(TypeError, match=f"job 'at' .*got {shown}"):
        kiq.Client(config).push({"class": Refusable, "args": [1], "at": when})
    with pytest.raises(kiq.errors.InvalidJobError, match=rf"push_bulk 'at'\[1\] .*got {shown}"):
        kiq.Client(config).push_bulk({"class": Refusable, "args": [[1], [2]], "at": [time.time() + 60, when]})
    assert nothing_written(r)


def test_a_time_a_middleware_breaks_is_refused(config: kiq.Config, r: redis.Redis) -> None:
    class Postpone(ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Wrapper:
            job["at"] = float("inf")
            yield

    config.client_middleware.add(Postpone)
    with pytest.raises(kiq.JobArgumentError, match=r"payload\['at'\] = inf is not a finite number"):
        Refusable.perform_in(60, 1)
    assert nothing_written(r)


# -- bulk pushes: nothing is written unless every job of every batch is good ----------------------------------
JOBS = 2_501  # three batches of 1,000, 1,000 and 501


def bulk_args(bad: list[Any], position: int) -> list[list[Any]]:
    args: list[list[Any]] = [[index, "ok"] for index in range(JOBS)]
    args[position] = bad
    return args


@pytest.mark.parametrize("position", [JOBS - 1, 0], ids=["last", "first"])
@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ([1, {"k": "\ud800"}], r"args\[1\]\['k'\] = '\\ud800' is not UTF-8 text"),
        (["\udcff"], r"args\[0\] = '\\udcff' is not UTF-8 text"),
        ([float("nan")], r"args\[0\] = nan is not a finite number"),
        ([(1, 2)], r"args\[0\] = \(1, 2\) is a tuple"),
    ],
    ids=["escaped-surrogate", "surrogateescape", "nan", "tuple"],
)
def test_a_bad_job_anywhere_in_a_bulk_push_writes_nothing(
    r: redis.Redis, bad: list[Any], where: str, position: int
) -> None:
    with pytest.raises(kiq.JobArgumentError, match=where):
        Refusable.perform_bulk(bulk_args(bad, position))
    assert nothing_written(r)


def test_a_bad_field_a_middleware_adds_to_the_last_job_of_a_bulk_push_writes_nothing(
    config: kiq.Config, r: redis.Redis
) -> None:
    class BreakTheLast(ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Wrapper:
            if job["args"][0] == JOBS - 1:
                job["note"] = "\udc80"
            yield

    config.client_middleware.add(BreakTheLast)
    with pytest.raises(kiq.JobArgumentError, match=r"payload\['note'\] = '\\udc80'"):
        Refusable.perform_bulk(bulk_args([JOBS - 1, "ok"], JOBS - 1))
    assert nothing_written(r)
    jids = Refusable.perform_bulk([[index] for index in range(JOBS - 1)])  # the control: the same, without the bad one
    assert r.llen("queue:default") == JOBS - 1 and len(set(jids)) == JOBS - 1


@pytest.mark.own_redis  # reads the server-wide command stats: no other test process may count there
def test_a_bulk_push_of_good_jobs_writes_them_all_in_three_round_trips(r: redis.Redis) -> None:
    r.config_resetstat()
    jids = Refusable.perform_bulk([[index, "é", 2**70] for index in range(JOBS)])
    assert r.info("commandstats")["cmdstat_lpush"]["calls"] == 3
    written = [json.loads(raw) for raw in reversed(r.lrange("queue:default", 0, -1))]
    assert [job["jid"] for job in written] == jids
    assert written[-1]["args"] == [JOBS - 1, "é", 2**70]  # exact: the big integer went through the stdlib


# -- the poller: a due job that can never be pushed goes to the dead set once ---------------------------------
def test_a_due_job_with_a_lone_surrogate_goes_to_the_dead_set_instead_of_a_hot_loop(
    config: kiq.Config, r: redis.Redis
) -> None:
    raw = '{"class":"Refusable","args":["\\ud800"],"jid":"a1b2c3","queue":"default","retry":true}'
    r.zadd("schedule", {raw: time.time() - 5})
    assert Poller(config).enqueue_jobs() == 0
    assert r.zrange("dead", 0, -1) == [raw]
    assert r.zcard("schedule") == 0 and r.llen("queue:default") == 0
