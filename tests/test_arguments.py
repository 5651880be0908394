"""Keyword arguments and typed arguments (kiq.arguments): what a push writes, what ``perform`` receives through a
real worker (sync and async jobs) and the testing modes, what is refused at push, and what a payload from another
producer that does not convert becomes (a retry with a clear error)."""

from __future__ import annotations

import inspect
import json
import math
import time as clock
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
import redis

import kiq
from kiq import testing
from kiq.plan import plan_of
from tests.jobs import typed
from tests.jobs.basic import Record
from tests.jobs.typed import Color, Keywords, Later, Line, Order, Stamp, TypedAsync, typed_sync
from tests.support import FAST, WorkerProcess, run_async, wait_until

StartWorker = Callable[..., WorkerProcess]
ID = UUID("8f14e45f-ceea-467a-9575-4bc0c8e5b1a2")
OTHER = UUID("c9f0f895-fb98-4b91-9e4b-a0b3b5d0f1c4")


def sample(key: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments of every converted kind for the typed jobs, aware datetimes in two zones."""
    placed = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
    args = (key, ID, Decimal("12.50"), date(2026, 1, 2), date(2026, 1, 3))
    kwargs = {
        "when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2))),
        "at": time(12, 30, 15),
        "wait": timedelta(days=1, seconds=3, microseconds=500),
        "color": Color.BLUE,
        "order": Order(OTHER, Decimal("99.90"), placed, [Line(sku=ID, day=date(2026, 5, 6))]),
        "line": Line(sku=OTHER, day=date(2026, 7, 8)),
        "totals": {"eur": Decimal("1.10"), "usd": Decimal("-3")},
        "maybe": OTHER,
        "deadline": placed,  # into **more: datetime
    }
    return args, kwargs


def test_a_payload_without_keyword_arguments_is_byte_for_byte_what_it_was(r: redis.Redis) -> None:
    jid = Keywords.set(queue="low").perform_async("k", 2)
    (raw,) = r.lrange("queue:low", 0, -1)
    job = json.loads(raw)
    fields = {"retry": True, "queue": "low", "class": "Keywords", "args": ["k", 2], "jid": jid}
    written = {**fields, "created_at": job["created_at"], "enqueued_at": job["enqueued_at"]}
    assert raw == json.dumps(written, separators=(",", ":"))  # the fields, their order and their spelling
    Keywords.perform_async("k", amount=2, note="n")
    (raw,) = r.lrange("queue:default", 0, -1)
    assert '"args":["k"],"kwargs":{"amount":2,"note":"n"},"jid":' in raw  # kwargs right after args


def test_a_job_class_without_converted_parameters_has_no_plan() -> None:
    assert plan_of(Keywords).arguments is None and plan_of(Record).arguments is None  # its pushes and runs pay nothing
    assert plan_of(TypedAsync).arguments is not None and plan_of(typed_sync.job_class).arguments is not None


def test_typed_values_are_written_in_their_json_form(r: redis.Redis) -> None:
    args, kwargs = sample("wire")
    typed_sync.perform_async(*args, **kwargs)
    job = json.loads(r.lindex("queue:default", 0))
    assert job["args"] == ["wire", str(ID), "12.50", "2026-01-02", "2026-01-03"]
    assert job["kwargs"] == {
        "when": "2026-01-02T03:04:05+02:00",
        "at": "12:30:15",
        "wait": "P1DT3.0005S",
        "color": "blue",
        "order": {
            "id": str(OTHER),
            "total": "99.90",
            "placed": "2026-03-04T05:06:07.890123Z",
            "lines": [{"sku": str(ID), "day": "2026-05-06"}],
        },
        "line": {"sku": str(OTHER), "day": "2026-07-08"},
        "totals": {"eur": "1.10", "usd": "-3"},
        "maybe": str(OTHER),
        "deadline": "2026-03-04T05:06:07.890123Z",
    }


def test_keyword_and_typed_arguments_round_trip_through_a_real_worker(
    start_worker: StartWorker, e2e_config: kiq.Config
) -> None:
    r = e2e_config.redis
    pushes: dict[str, tuple[Any, tuple[Any, ...], dict[str, Any]]] = {}
    for job in (typed_sync, TypedAsync):
        for how in ("async", "in", "at", "set", "bulk", "aio"):
            key = f"{getattr(job, 'kiq_name', 'TypedSync')}-{how}"
            args, kwargs = sample(key)
            pushes[key] = (job, args, kwargs)
            if how == "async":
                job.perform_async(*args, **kwargs)
            elif how == "in":
                job.perform_in(timedelta(seconds=-1), *args, **kwargs)  # due already: straight to the queue
            elif how == "at":
                job.perform_at(datetime.now(UTC) - timedelta(seconds=1), *args, **kwargs)
            elif how == "set":
                job.set(retry=1).perform_async(*args, **kwargs)
            elif how == "bulk":
                job.perform_bulk([kiq.Call(*args, **kwargs)])
            else:
                run_async(e2e_config, lambda job=job, args=args, kwargs=kwargs: job.aio.perform_async(*args, **kwargs))
    pushes["Keywords"] = (Keywords, ("Keywords",), {"note": "n", "amount": 3})
    Keywords.perform_async("Keywords", note="n", amount=3)
    worker = start_worker("-r", "tests.jobs.typed", "-c", "4", env=FAST)
    wait_until(lambda: r.hlen("received") == len(pushes), 60, message=f"{len(pushes)} jobs performed")
    assert worker.stop() == 0
    got = r.hgetall("received")
    assert got == {key: typed.expected(job, args, kwargs) for key, (job, args, kwargs) in pushes.items()}
    assert r.zcard("retry") == 0 and r.get("stat:failed") in (None, "0")


def test_keyword_and_typed_arguments_round_trip_in_fake_and_inline_modes(config: kiq.Config) -> None:
    # config: the jobs record what they received in the test's Redis (the default config's)
    typed.received.clear()
    with testing.fake() as fake:
        for job in (typed_sync, TypedAsync):
            args, kwargs = sample(f"fake-{job}")
            job.perform_async(*args, **kwargs)
        Keywords.perform_bulk([kiq.Call("fake-kw", note="x"), ["fake-plain", 5]])
        assert [job.get("kwargs") for job in Keywords.jobs] == [{"note": "x"}, None]
        assert fake.drain() == 4
    with testing.inline():
        for job in (typed_sync, TypedAsync):
            args, kwargs = sample(f"inline-{job}")
            job.perform_async(*args, **kwargs)
    expected = {
        f"{mode}-{job}": typed.expected(job, *sample(f"{mode}-{job}"))
        for mode in ("fake", "inline")
        for job in (typed_sync, TypedAsync)
    }
    expected["fake-kw"] = typed.expected(Keywords, ("fake-kw",), {"note": "x"})
    expected["fake-plain"] = typed.expected(Keywords, ("fake-plain", 5), {})
    assert typed.received == expected


def test_a_payload_from_another_producer_that_does_not_convert_ends_in_retry_with_a_clear_error(
    start_worker: StartWorker, e2e_config: kiq.Config
) -> None:
    r = e2e_config.redis
    now = clock.time()
    wire_kwargs = {"when": "2026-01-02T03:04:05Z", "at": "12:30:15", "wait": "PT5S", "color": "red",
                   "order": {"id": str(ID), "total": "1", "placed": "2026-01-02T03:04:05Z", "lines": []},
                   "line": {"sku": str(ID), "day": "2026-01-02"}, "totals": {}}  # fmt: skip
    # written by hand as Sidekiq's Ruby client writes a job: args a JSON list, unknown keys kept
    ruby = {"class": "TypedSync", "queue": "default", "retry": True, "created_at": now, "enqueued_at": now}
    payloads = {
        "bad-uuid": {**ruby, "jid": "a" * 24, "args": ["bad-uuid", "not-a-uuid", "1.5"], "kwargs": wire_kwargs},
        "naive": {
            **ruby,
            "jid": "b" * 24,
            "args": ["naive", str(ID), 2],
            "kwargs": {**wire_kwargs, "when": "2026-01-02T03:04:05"},
        },
        "not-an-object": {**ruby, "jid": "c" * 24, "args": ["x", str(ID), 1], "kwargs": ["when"]},
        "converts": {**ruby, "jid": "d" * 24, "args": ["converts", str(ID), 1.5], "kwargs": wire_kwargs},
    }
    for payload in payloads.values():
        r.lpush("queue:default", json.dumps(payload))
    worker = start_worker("-r", "tests.jobs.typed", "-c", "2", env=FAST)
    wait_until(lambda: r.zcard("retry") == 3 and r.hlen("received") == 1, 60, message="3 retries and 1 run")
    assert worker.stop() == 0
    retries = {job["jid"]: job for job in map(json.loads, r.zrange("retry", 0, -1))}
    assert {job["error_class"] for job in retries.values()} == {"kiq.errors.ArgumentError"}
    assert retries["a" * 24]["error_message"] == (
        "TypedSync: argument 'id' (args[1] of the payload) = 'not-a-uuid' cannot be read as UUID: Invalid UUID"
    )
    assert (
        "argument 'when' (kwargs['when'] of the payload) = '2026-01-02T03:04:05'" in retries["b" * 24]["error_message"]
        and "naive datetime" in retries["b" * 24]["error_message"]
    )
    assert "'kwargs' must be a JSON object" in retries["c" * 24]["error_message"]
    assert retries["a" * 24]["kwargs"] == wire_kwargs  # the payload is kept as it came, for its retries
    assert "('amount', Decimal('1.5'))" in r.hget("received", "converts")  # a number reads as a Decimal too


def test_perform_at_an_aware_datetime_and_perform_in_a_timedelta_are_scheduled_at_their_instant(
    r: redis.Redis,
) -> None:
    at = datetime(2099, 1, 2, 3, 4, 5, 250000, tzinfo=timezone(timedelta(hours=-5)))
    jid = Keywords.perform_at(at, "k", amount=2)
    before = clock.time()
    Record.perform_in(timedelta(minutes=5), "later")
    after = clock.time()
    (scheduled, score), (later, later_score) = sorted(r.zrange("schedule", 0, -1, withscores=True), key=lambda e: -e[1])
    assert json.loads(scheduled)["jid"] == jid and score == at.timestamp()
    assert json.loads(scheduled)["kwargs"] == {"amount": 2}
    assert before + 300 <= later_score <= after + 300 and json.loads(later)["args"] == ["later"]
    with pytest.raises(kiq.InvalidJobError, match=r"naive datetime \(2099-01-02T03:04:05, no tzinfo\)"):
        Keywords.perform_at(datetime(2099, 1, 2, 3, 4, 5), "k")
    with pytest.raises(kiq.InvalidJobError, match="naive datetime"):
        run_async(kiq.default_config(), lambda: Keywords.aio.perform_at(datetime(2099, 1, 2), "k"))
    with pytest.raises(kiq.InvalidJobError, match="finite number of seconds"):
        Keywords.perform_in(math.inf, "k")
    assert r.zcard("schedule") == 2 and r.llen("queue:default") == 0


def push_typed(args: tuple[Any, ...] = (), **changes: Any) -> str | None:
    """``typed_sync`` pushed with the sample's arguments, some replaced."""
    sample_args, kwargs = sample("k")
    return typed_sync.perform_async(*(args or sample_args), **{**kwargs, **changes})


@pytest.mark.parametrize(
    ("push", "message"),
    [
        (lambda: push_typed(("k", "nope", 1)), r"argument 'id' \(args\[1\]\) is annotated UUID, but 'nope'"),
        (lambda: push_typed(("k", ID, "x1")), r"argument 'amount' \(args\[2\]\) is annotated Decimal"),
        (lambda: push_typed(("k", ID, 1, "2026-13-01")), r"argument 'days' \(args\[3\]\) is annotated date"),
        (
            lambda: push_typed(when=datetime(2026, 1, 1)),
            r"argument 'when' \(kwargs\['when'\]\) is annotated datetime, .* a naive datetime",
        ),
        (lambda: push_typed(color="green"), r"argument 'color' .* annotated Color, but 'green' cannot be one"),
        (
            lambda: push_typed(line={"sku": 1}),
            r"TypedSync: argument 'line' .* annotated Line, but \{'sku': 1\} cannot be one: "
            r"Expected `uuid`, got `int` - at `\$.sku`",
        ),
        (
            lambda: Keywords.perform_async("k", amount=math.nan),
            r"Keyword argument 'amount' .* kwargs\['amount'\] = nan",
        ),
        (lambda: Keywords.perform_async("k", amount=ID), r"kwargs\['amount'\] = UUID.*annotate its parameter"),
        (lambda: Record.perform_async(Decimal(1)), r"args\[0\] = Decimal\('1'\).*annotate its parameter"),
        (lambda: Keywords.perform_async("k", colour=1), r"got an unexpected keyword argument 'colour'"),
        (
            lambda: kiq.Client().push({"class": Keywords, "args": ["k"], "kwargs": {1: 2}}),
            r"keyword argument names must be strings .* got 1",
        ),
    ],
)
def test_a_value_a_parameter_cannot_take_is_refused_at_push_with_its_name(
    r: redis.Redis, push: Callable[[], Any], message: str
) -> None:
    with pytest.raises(kiq.InvalidJobError, match=message):
        push()
    assert r.dbsize() == 0


def test_a_valid_json_form_is_accepted_for_a_typed_parameter(r: redis.Redis) -> None:
    kwargs = sample("strings")[1]
    typed_sync.perform_async("strings", str(ID), "12.50", **{**kwargs, "when": "2026-01-02T03:04:05Z"})
    job = json.loads(r.lindex("queue:default", 0))
    assert job["args"] == ["strings", str(ID), "12.50"] and job["kwargs"]["when"] == "2026-01-02T03:04:05Z"


def test_perform_bulk_takes_calls_and_lists_and_checks_each_before_pushing_any(r: redis.Redis) -> None:
    jids = Keywords.perform_bulk([kiq.Call("a", note="x"), ["b", 2], kiq.Call("c", 3)])
    jobs = {job["jid"]: job for job in map(json.loads, r.lrange("queue:default", 0, -1))}
    assert [(jobs[jid]["args"], jobs[jid].get("kwargs")) for jid in jids] == [
        (["a"], {"note": "x"}),
        (["b", 2], None),
        (["c", 3], None),
    ]
    with pytest.raises(kiq.InvalidJobError, match=r"in args\[1\]: got an unexpected keyword argument 'nope'"):
        Keywords.perform_bulk([kiq.Call("d"), kiq.Call("e", nope=1)])
    with pytest.raises(kiq.InvalidJobError, match=r"argument 'id' \(args\[1\]\) is annotated UUID"):
        typed_sync.perform_bulk(
            [kiq.Call(*sample("f")[0], **sample("f")[1]), kiq.Call("g", "bad", 1, **sample("g")[1])]
        )
    assert r.llen("queue:default") == 3
    assert repr(kiq.Call(1, a=2)) == "Call(1, a=2)" and kiq.Call(1, a=2) == kiq.Call(1, a=2)


def _signatures() -> list[Callable[..., Any]]:
    def plain(a, b=1): ...  # type: ignore[no-untyped-def]
    def keyword_only(a, *, force, mode="x"): ...  # type: ignore[no-untyped-def]
    def positional_only(a, /, b): ...  # type: ignore[no-untyped-def]
    def rest(a, *more, flag=False): ...  # type: ignore[no-untyped-def]
    def anything(a=0, **options): ...  # type: ignore[no-untyped-def]

    return [plain, keyword_only, positional_only, rest, anything]


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((), {}), ((1,), {}), ((1, 2), {}), ((1, 2, 3), {}), ((), {"a": 1}), ((1,), {"a": 1}), ((1,), {"b": 2}),
    ((), {"a": 1, "b": 2}), ((1,), {"force": True}), ((1,), {"force": True, "mode": "y"}), ((1,), {"mode": "y"}),
    ((1, 2), {"flag": True}), ((1,), {"other": 1}), ((), {"options": 1}), ((1, 2), {"force": 1}),
]  # fmt: skip


@pytest.mark.parametrize("function", _signatures(), ids=lambda function: function.__name__)
def test_the_push_check_of_keyword_arguments_says_what_signature_bind_says(function: Callable[..., Any]) -> None:
    from kiq.arity import arity_of, fits

    arity = arity_of(function, method=False)
    assert arity is not None
    for args, kwargs in CALLS:
        try:
            inspect.signature(function).bind(*args, **kwargs)
            binds = True
        except TypeError:
            binds = False
        assert fits(arity, len(args), kwargs) is binds, (function.__name__, args, kwargs)


def test_a_forward_reference_is_read_at_the_first_push_and_an_unknown_annotation_is_not_converted(
    config: kiq.Config,
) -> None:
    typed.received.clear()
    stamp = Stamp(datetime(2026, 1, 2, tzinfo=UTC))
    with testing.fake() as fake:
        Later.perform_async("later", stamp, note={"any": "json"})  # `Unknown` resolves nowhere: passed as it is
        assert Later.jobs[0]["args"] == ["later", {"at": "2026-01-02T00:00:00Z"}]
        with pytest.raises(kiq.JobArgumentError, match=r"kwargs\['note'\] = UUID.*annotate its parameter"):
            Later.perform_async("later", stamp, note=ID)
        assert fake.drain() == 1
    assert typed.received == {"later": repr([("key", "later"), ("note", {"any": "json"}), ("stamp", stamp)])}
