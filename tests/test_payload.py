"""Strict arguments: anything that would not survive a JSON round trip is refused with its path."""

from __future__ import annotations

import datetime
import decimal
import math
import re
from typing import Any

import pytest

import kiq.payload
from kiq.errors import JobArgumentError
from kiq.payload import check_args, dumps, loads, new_jid


@pytest.mark.parametrize(
    ("args", "path", "shown"),
    [
        ([{1, 2}], "args[0]", "{1, 2}"),
        ([1, b"raw"], "args[1]", "b'raw'"),
        ([datetime.date(2024, 1, 2)], "args[0]", "datetime.date(2024, 1, 2)"),
        ([[1, (2, 3)]], "args[0][1]", "(2, 3)"),
        ([{"a": {"b": float("nan")}}], "args[0]['a']['b']", "nan"),
        ([float("inf")], "args[0]", "inf"),
        ([{"ok": 1, 2: "int key"}], "args[0]", "2"),
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
