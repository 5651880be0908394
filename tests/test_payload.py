"""Strict arguments: anything that would not survive a JSON round trip is refused with its path."""

from __future__ import annotations

import datetime
import decimal
import math
import re
from typing import Any

import pytest

import kiq.payload
from kiq.errors import InvalidJobError, JobArgumentError
from kiq.payload import (
    check_args,
    check_job,
    check_options,
    dumps,
    encode_checked,
    finite_seconds,
    loads,
    new_jid,
    new_public_id,
)


@pytest.mark.parametrize(
    ("args", "path", "shown"),
    [
        ([{1, 2}], "args[0]", "{1, 2}"),
        ([1, b"raw"], "args[1]", "b'raw'"),
        ([datetime.date(2024, 1, 2)], "args[0]", "datetime.date(2024, 1, 2)"),
        ([[1, (2, 3)]], "args[0][1]", "(2, 3)"),
        ([{"a": {"b": float("nan")}}], "args[0]['a']['b']", "nan"),
        ([float("inf")], "args[0]", "inf"),
        ([decimal.Decimal("1.5")], "args[0]", "Decimal('1.5')"),
        ([object()], "args[0]", "<object object"),
    ],
)
def test_non_json_argument_names_value_and_path(args: list[Any], path: str, shown: str) -> None:
    with pytest.raises(JobArgumentError) as raised:
        check_args(args, "Mailer")
    message = str(raised.value)
    assert "Mailer" in message
    assert f"{path} = {shown}" in message


def test_a_non_string_key_is_named_with_the_dict_that_holds_it() -> None:
    with pytest.raises(JobArgumentError, match=r"args\[0\]\['a'\] has the key 2, which is of type int"):
        check_args([{"a": {"ok": 1, 2: "int key"}}], "Mailer")


def test_json_native_arguments_pass_and_round_trip() -> None:
    args = [1, -2.5, "é", True, None, [1, [2]], {"k": {"n": [None]}}, 2**70]
    check_args(args, "Job")
    assert loads(dumps({"args": args}))["args"] == args


def test_error_is_type_and_value_error() -> None:
    with pytest.raises(TypeError):
        check_args([{1}], "J")
    with pytest.raises(ValueError):
        check_args([float("nan")], "J")


def test_long_values_are_shortened_in_the_message() -> None:
    with pytest.raises(JobArgumentError, match=r"\.\.\. is a set"):
        check_args([set(range(1000))], "J")


def test_jid_is_24_hex_and_unique() -> None:
    jids = {new_jid() for _ in range(1000)}
    assert len(jids) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{24}", jid) for jid in jids)


def test_a_public_id_is_22_url_safe_characters_and_never_starts_like_an_option() -> None:
    ids = {new_public_id() for _ in range(5000)}  # ~78 of 5,000 tokens start with "-": regenerated
    assert len(ids) == 5000
    assert all(len(token) == 22 and re.fullmatch(r"[A-Za-z0-9_-]+", token) and token[0] != "-" for token in ids)


def test_dumps_is_compact_utf8() -> None:
    assert dumps({"a": [1, "é"]}) == '{"a":[1,"é"]}'


# the JSON path is orjson when the ``fast`` extra is installed, the stdlib otherwise; both must agree
@pytest.fixture(params=["installed", "stdlib"])
def json_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "stdlib":
        monkeypatch.setattr(kiq.payload, "orjson", None)
    return str(request.param)


def test_payloads_are_compact_utf8_json(json_path: str) -> None:
    payload = {"class": "Mailer", "args": [1, "é", 2.5, None, True, {"k": []}], "jid": "abc", "at": 1700000000.25}
    text = dumps(payload)
    assert text == '{"class":"Mailer","args":[1,"é",2.5,null,true,{"k":[]}],"jid":"abc","at":1700000000.25}'
    assert loads(text) == payload


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 2**70, 10**30])
def test_integers_beyond_64_bits_stay_exact(json_path: str, number: int) -> None:
    assert dumps({"args": [number]}) == f'{{"args":[{number}]}}'
    assert loads(f'{{"args":[{number}],"jid":"x"}}')["args"] == [number]  # as Ruby wrote it


def test_what_only_the_stdlib_reads_is_still_read(json_path: str) -> None:
    assert math.isnan(loads('{"args":[NaN]}')["args"][0])
    assert loads('{"args":["\\ud800"]}')["args"] == ["\ud800"]
    with pytest.raises(ValueError):
        loads('{"args":')


def test_what_the_stdlib_refuses_is_still_refused(json_path: str) -> None:
    with pytest.raises(TypeError):
        dumps({"at": datetime.datetime(2024, 1, 2)})
    assert dumps({"args": [{1: "int key"}]}) == '{"args":[{"1":"int key"}]}'  # the stdlib's conversion


# -- the push path: every field checked, lone surrogates named -----------------------------------------------
def job_with(**fields: Any) -> dict[str, Any]:
    return {"class": "Mailer", "args": [1], "jid": "abc", **fields}


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [
        ("foo", float("nan"), "payload['foo'] = nan is not a finite number"),
        ("foo", {"deep": [float("-inf")]}, "payload['foo']['deep'][0] = -inf is not a finite number"),
        ("created_at", float("inf"), "payload['created_at'] = inf is not a finite number"),
        ("tags", ("a",), "payload['tags'] = ('a',) is a tuple, not a native JSON type; use a list"),
        ("foo", object(), "payload['foo'] = <object object"),
        (7, "int key", "payload has the key 7, which is of type int"),
    ],
)
def test_every_field_of_the_payload_is_checked(field: Any, value: Any, where: str) -> None:
    with pytest.raises(JobArgumentError, match="The payload of Mailer must be native JSON") as raised:
        check_job({**job_with(), field: value})
    assert where in str(raised.value)


@pytest.mark.parametrize(
    ("args", "where"),
    [
        ([1, {"k": "ab\udc80"}], "args[1]['k'] = 'ab\\udc80' is not UTF-8 text: it holds the lone surrogate U+DC80"),
        (["\ud800"], "args[0] = '\\ud800' is not UTF-8 text: it holds the lone surrogate U+D800 at index 0"),
        ([[{"x\udfff": 1}]], "args[0][0] has the key 'x\\udfff', which is not UTF-8 text"),
    ],
)
def test_a_lone_surrogate_is_refused_by_the_encoder_with_its_path(json_path: str, args: list[Any], where: str) -> None:
    job = job_with(args=args)
    check_job(job)  # native types: the encoder is what finds the surrogate
    with pytest.raises(JobArgumentError, match="Job arguments to Mailer must be native JSON") as raised:
        encode_checked(job)
    assert where in str(raised.value)
    str(raised.value).encode("utf-8")  # the message itself can be logged


def test_a_lone_surrogate_in_another_field_is_named(json_path: str) -> None:
    with pytest.raises(JobArgumentError, match=r"payload\['note'\]\[0\] = '\\udcff'"):
        encode_checked(job_with(note=["\udcff"]))


def test_encoded_jobs_are_compact_utf8_text(json_path: str) -> None:
    job = job_with(args=[1, "é", 2**70, {"k": [None, 2.5]}])
    text = encode_checked(job)
    assert text == '{"class":"Mailer","args":[1,"é",1180591620717411303424,{"k":[null,2.5]}],"jid":"abc"}'
    assert loads(text) == job


def test_options_are_checked_with_their_path() -> None:
    check_options({"queue": "a", "track": True, "meta": {"k": [1.5]}}, "Mailer")
    with pytest.raises(JobArgumentError, match=r"Mailer: options must be native JSON .* options\['meta'\]\['k'\]"):
        check_options({"meta": {"k": float("nan")}}, "Mailer")
    with pytest.raises(JobArgumentError, match=r"options\['who'\] = 'x\\udc80' is not UTF-8 text"):
        check_options({"who": "x\udc80"}, "Mailer")


# -- dumps: re-encoding what was read from Redis never fails on a lone surrogate --------------------------
READ_WITH_SURROGATEESCAPE = b'{"class":"M","args":["caf\xe9",{"k\xff":1}]}'.decode("utf-8", "surrogateescape")


@pytest.mark.parametrize(
    "payload",
    [loads(READ_WITH_SURROGATEESCAPE), {"args": ["\ud800", "é"]}, {"args": [2**70, "\udc80"]}],
    ids=["bytes-not-utf8", "escaped-high-surrogate", "with-a-big-integer"],
)
def test_dumps_writes_lone_surrogates_as_escapes(json_path: str, payload: dict[str, Any]) -> None:
    text = dumps(payload)
    assert text.isascii()  # UTF-8 by construction: the escapes are ASCII
    assert "\\ud" in text
    assert loads(text) == payload  # the same strings come back


def test_dumps_keeps_utf8_text_unescaped(json_path: str) -> None:
    assert dumps({"args": ["é", "日本"]}) == '{"args":["é","日本"]}'


@pytest.mark.parametrize("seconds", [0, -5, 1.5, 1_700_000_000, 10**6])
def test_finite_seconds_pass(seconds: float) -> None:
    assert finite_seconds(seconds, "x") == float(seconds)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (float("nan"), "must be a finite number of seconds, got nan"),
        (float("inf"), "must be a finite number of seconds, got inf"),
        (float("-inf"), "must be a finite number of seconds, got -inf"),
        (10**400, "must be a finite number of seconds"),
        (True, "must be a number of seconds, got True"),
        ("60", "must be a number of seconds, got '60'"),
        (None, "must be a number of seconds, got None"),
    ],
    ids=["nan", "inf", "-inf", "huge-int", "bool", "str", "None"],
)
def test_finite_seconds_refuse(value: object, message: str) -> None:
    with pytest.raises(InvalidJobError, match=re.escape(f"perform_in's interval {message}")):
        finite_seconds(value, "perform_in's interval")
