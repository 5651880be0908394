"""ActiveJob's argument rules in both directions (kiq.plugins.activejob.arguments) and the GlobalID value."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from kiq.plugins.activejob import ActiveJobError, GlobalID, Symbol, decode_arguments, encode_arguments

SERIALIZERS = "ActiveJob::Serializers::"


def serialized(name: str, **fields: Any) -> dict[str, Any]:
    return {"_aj_serialized": SERIALIZERS + name, **fields}


@pytest.mark.parametrize(
    ("wire", "value", "kind"),
    [
        (serialized("SymbolSerializer", value="draft"), "draft", Symbol),
        (serialized("DateSerializer", value="2026-11-25"), date(2026, 11, 25), date),
        (serialized("TimeSerializer", value="2026-11-25T09:16:38.123456789Z"),
         datetime(2026, 11, 25, 9, 16, 38, 123456, tzinfo=UTC), datetime),
        (serialized("DateTimeSerializer", value="2026-11-25T10:00:00+02:00"),
         datetime(2026, 11, 25, 8, 0, tzinfo=UTC), datetime),
        (serialized("TimeWithZoneSerializer", value="2026-11-25T12:30:15.000000000+01:00"),
         datetime(2026, 11, 25, 11, 30, 15, tzinfo=UTC), datetime),
        (serialized("DurationSerializer", value=90.5, parts=[]), timedelta(seconds=90.5), timedelta),
        (serialized("BigDecimalSerializer", value="0.1e1"), Decimal("1"), Decimal),
        (serialized("ModuleSerializer", value="Billing::Invoice"), "Billing::Invoice", str),
        ({"_aj_globalid": "gid://shop/User/7"}, GlobalID("shop", "User", "7"), GlobalID),
    ],
)  # fmt: skip
def test_each_serializer_decodes_to_its_python_type(wire: dict[str, Any], value: object, kind: type) -> None:
    args, kwargs = decode_arguments([wire])
    assert args == [value] and type(args[0]) is kind and kwargs == {}


def test_times_are_aware_and_a_time_zone_name_is_kept() -> None:
    (moment,), _ = decode_arguments(
        [serialized("TimeWithZoneSerializer", value="2026-07-01T12:00:00+02:00", time_zone="Europe/Berlin")]
    )
    assert moment.utcoffset() == timedelta(hours=2) and str(moment.tzinfo) == "Europe/Berlin"
    (unknown_zone,), _ = decode_arguments(
        [serialized("TimeWithZoneSerializer", value="2026-07-01T12:00:00+02:00", time_zone="Mars/Olympus")]
    )
    assert unknown_zone.utcoffset() == timedelta(hours=2)


def test_hash_markers_are_dropped_symbol_keys_become_symbols_and_keywords_become_kwargs() -> None:
    args, kwargs = decode_arguments(
        [
            {"a": 1, "b": [{"c": 2, "_aj_symbol_keys": []}], "_aj_symbol_keys": ["b"]},
            {"e": {"f": None, "_aj_hash_with_indifferent_access": True}, "_aj_hash_with_indifferent_access": True},
            {"when": serialized("DateSerializer", value="2026-12-01"), "_aj_ruby2_keywords": ["when"]},
        ]
    )
    assert args == [{"a": 1, "b": [{"c": 2}]}, {"e": {"f": None}}]
    assert [type(key) for key in args[0]] == [str, Symbol]
    assert kwargs == {"when": date(2026, 12, 1)} and [type(key) for key in kwargs] == [str]


def test_a_keyword_hash_that_is_not_last_stays_a_positional_dict() -> None:
    args, kwargs = decode_arguments([{"a": 1, "_aj_ruby2_keywords": ["a"]}, 2])
    assert args == [{"a": 1}, 2] and kwargs == {}


def test_an_unknown_serializer_names_the_argument_and_the_known_ones() -> None:
    with pytest.raises(ActiveJobError) as error:
        decode_arguments([1, [{"k": serialized("RangeSerializer", begin=1)}]])
    assert str(error.value) == (
        "arguments[1][0]['k']: kiq has no decoder for the ActiveJob serializer "
        "'ActiveJob::Serializers::RangeSerializer' (it decodes BigDecimalSerializer, DateSerializer, "
        "DateTimeSerializer, DurationSerializer, ModuleSerializer, SymbolSerializer, TimeSerializer, "
        "TimeWithZoneSerializer); pass this argument as one of those types or a JSON value, or run this job in Ruby"
    )


def test_a_malformed_value_is_an_activejob_error() -> None:
    with pytest.raises(ActiveJobError, match=r"arguments\[0\]: a malformed .*DateSerializer value .*'soon'"):
        decode_arguments([serialized("DateSerializer", value="soon")])


# -- Python -> Ruby ------------------------------------------------------------------------------------------
def test_every_python_type_encodes_to_activejobs_form() -> None:
    encoded = encode_arguments(
        (1, 2.5, "x", None, True, Symbol("s"), Decimal("1.50"), date(2026, 1, 2),
         datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=-5))), timedelta(minutes=2),
         timedelta(milliseconds=1500), GlobalID("shop", "Admin::User", "3/4", {"tenant": "eu"}),
         ({"a": [1]}, {Symbol("b"): 2})),
        {"when": date(2026, 12, 1)},
        decimal_serializer=True,
    )  # fmt: skip
    assert encoded == [
        1, 2.5, "x", None, True,
        serialized("SymbolSerializer", value="s"),
        serialized("BigDecimalSerializer", value="1.50"),
        serialized("DateSerializer", value="2026-01-02"),
        serialized("TimeSerializer", value="2026-01-02T03:04:05.000006-05:00"),
        serialized("DurationSerializer", value=120, parts=[[serialized("SymbolSerializer", value="seconds"), 120]]),
        serialized("DurationSerializer", value=1.5, parts=[[serialized("SymbolSerializer", value="seconds"), 1.5]]),
        {"_aj_globalid": "gid://shop/Admin::User/3/4?tenant=eu"},
        [{"a": [1], "_aj_symbol_keys": []}, {"b": 2, "_aj_symbol_keys": ["b"]}],
        {"when": serialized("DateSerializer", value="2026-12-01"), "_aj_ruby2_keywords": ["when"]},
    ]  # fmt: skip


def test_rails_6_1_gets_a_decimal_as_its_string() -> None:
    assert encode_arguments((Decimal("12.5"),), {}, decimal_serializer=False) == ["12.5"]


def test_what_is_encoded_decodes_back_to_equal_values() -> None:
    values = (Decimal("3.14"), date(2026, 1, 2), datetime(2026, 1, 2, 3, 4, tzinfo=UTC), timedelta(hours=1),
              Symbol("s"), {"k": [GlobalID("a", "B", "1")]})  # fmt: skip
    args, kwargs = decode_arguments(encode_arguments(values, {"x": Symbol("y")}, decimal_serializer=True))
    assert args == list(values) and kwargs == {"x": "y"} and type(kwargs["x"]) is Symbol


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (datetime(2026, 1, 2), r"args\[0\]: datetime.datetime\(2026, 1, 2, 0, 0\) has no time zone; Rails needs one"),
        ({1: "a"}, r"args\[0\]: the key 1 cannot be an ActiveJob hash key; use str keys"),
        ({"_aj_globalid": "x"}, r"the key '_aj_globalid' cannot be an ActiveJob hash key"),
        ([{1, 2}], r"args\[0\]\[0\]: set \{1, 2\} has no ActiveJob form; pass None, bool, int"),
    ],
)
def test_a_value_without_an_activejob_form_is_refused_naming_where_it_is(value: object, message: str) -> None:
    with pytest.raises(ActiveJobError, match=message):
        encode_arguments((value,), {}, decimal_serializer=True)


# -- GlobalID ------------------------------------------------------------------------------------------------
def test_a_global_id_parses_namespaced_models_composite_ids_and_params() -> None:
    gid = GlobalID.parse("gid://shop/Admin::User/3/4?tenant=eu")
    assert gid == GlobalID("shop", "Admin::User", "3/4", {"tenant": "eu"})
    assert gid.uri == str(gid) == "gid://shop/Admin::User/3/4?tenant=eu"


@pytest.mark.parametrize("uri", ["https://shop/User/1", "gid://shop/User", "gid://", 42])
def test_a_malformed_global_id_is_an_activejob_error(uri: Any) -> None:
    with pytest.raises(ActiveJobError, match=r"not a GlobalID URI: .*; expected gid://app/Model/id"):
        GlobalID.parse(uri)
