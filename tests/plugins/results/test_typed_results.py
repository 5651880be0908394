"""Typed results: a job's return annotation types its result as annotations type its arguments. The value is
stored in its JSON form (a Decimal as its string, ...) and read back by jid as the annotated type, from sync and
asyncio code; a value that is not the annotated type, or a stored value another producer wrote that does not read
as it, is an error naming the type; an unannotated value that is not strict JSON is still refused."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import uuid

import pytest
import redis

import kiq
import kiq.ext
from kiq.plugins.results import ResultError, aio, result
from tests.jobs.results import QUOTE, NotATotal, Quote, Quoted, Total, async_due
from tests.support import run_on_event_loop
from tests.tracking_support import work_off


def test_a_decimal_result_is_stored_as_its_text_and_read_back_as_a_decimal(config: kiq.Config, r: redis.Redis) -> None:
    jid = Total.perform_async(1230)
    assert jid is not None
    assert work_off(config) == 1
    assert json.loads(r.get(f"kiq:result:{jid}")) == {"value": "12.3", "class": "ResultsTotal"}
    value = result(jid)
    assert type(value) is decimal.Decimal and value == decimal.Decimal("12.30")

    async def read() -> object:
        try:
            return await aio.result(jid)
        finally:
            await kiq.AsyncClient(config).close()

    value = asyncio.run(read())
    assert type(value) is decimal.Decimal and value == decimal.Decimal("12.3")


def test_a_dataclass_of_uuid_decimal_and_datetime_comes_back_as_that_dataclass(config: kiq.Config) -> None:
    jid = Quoted.perform_async()
    assert jid is not None
    work_off(config)
    value = result(jid)
    assert type(value) is Quote and value == QUOTE
    assert type(value.sku) is uuid.UUID and value.at.tzinfo is not None


def test_an_async_jobs_typed_result(config: kiq.Config) -> None:
    jid = async_due.perform_async(31)
    assert jid is not None
    (unit,) = run_on_event_loop(config, [config.redis.rpop("queue:default")])
    assert unit.acked == 1
    assert result(jid) == datetime.date(2026, 2, 1)


def test_a_value_that_is_not_the_annotated_type_is_an_error_naming_the_type(config: kiq.Config, r: redis.Redis) -> None:
    jid = NotATotal.perform_async()
    assert jid is not None
    work_off(config)
    with pytest.raises(ResultError, match=r"ResultsNotATotal returned 'twelve', but its return annotation is Decimal"):
        result(jid)
    assert r.zcard("retry") == 0  # running it again would return the same


def test_a_foreign_result_that_does_not_convert_is_an_error_naming_the_type(config: kiq.Config, r: redis.Redis) -> None:
    jid = "f" * 24
    r.set(f"kiq:result:{jid}", json.dumps({"value": {"cents": 12}, "class": "ResultsTotal"}))
    with pytest.raises(ResultError, match=rf"job {jid}: ResultsTotal: the stored result .* cannot be read as Decimal"):
        result(jid)
    r.set(f"kiq:result:{jid}", json.dumps({"value": "9.99"}))  # an older record names no class: its JSON form
    assert result(jid) == "9.99"


def test_the_conversion_is_public_for_plugins() -> None:
    assert kiq.ext.result_form(Total, decimal.Decimal("1.50")) == "1.50"
    assert kiq.ext.result_value(Total, "1.50") == decimal.Decimal("1.50")
    assert kiq.ext.result_form(kiq.Job, {1, 2}) == {1, 2}  # no annotation: untouched, strict JSON is checked later
    with pytest.raises(kiq.ext.ResultTypeError, match="naive datetime"):
        kiq.ext.result_form(Quoted, Quote(QUOTE.sku, QUOTE.amount, datetime.datetime(2026, 1, 1)))
