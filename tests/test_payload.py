"""Strict arguments: anything that would not survive a JSON round trip is refused with its path."""

from __future__ import annotations

import datetime
import decimal
import re
from typing import Any

import pytest

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
