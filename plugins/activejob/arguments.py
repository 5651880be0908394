"""ActiveJob's argument serialization (activejob/lib/active_job/arguments.rb and serializers/), both ways.

JSON-native values travel as they are; hashes carry a marker key saying which keys were Ruby symbols
(``_aj_symbol_keys``), that it was a ``HashWithIndifferentAccess`` or a keyword-argument hash
(``_aj_ruby2_keywords``); other objects are ``{"_aj_serialized": "<serializer class>", "value": ...}`` and
records ``{"_aj_globalid": "gid://..."}``. The type table is in docs/ruby.md, "ActiveJob".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import ActiveJobError
from .values import GlobalID, Symbol

SERIALIZED = "_aj_serialized"
GLOBALID = "_aj_globalid"
SYMBOL_KEYS = "_aj_symbol_keys"
RUBY2_KEYWORDS = "_aj_ruby2_keywords"
INDIFFERENT = "_aj_hash_with_indifferent_access"
RESERVED = frozenset({SERIALIZED, GLOBALID, SYMBOL_KEYS, RUBY2_KEYWORDS, INDIFFERENT})
SERIALIZERS = "ActiveJob::Serializers::"


# -- Ruby -> Python ----------------------------------------------------------------------------------------
def _time(data: dict[str, Any]) -> datetime:
    moment = datetime.fromisoformat(data["value"])  # Ruby's iso8601(9): Python keeps the microseconds
    zone = data.get("time_zone")  # a TimeWithZone's tzinfo name, from Rails 7.1
    if not isinstance(zone, str):
        return moment
    try:
        return moment.astimezone(ZoneInfo(zone))
    except (ValueError, ZoneInfoNotFoundError):  # a zone this machine lacks: the offset alone is still right
        return moment


DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    SERIALIZERS + "SymbolSerializer": lambda data: Symbol(data["value"]),
    SERIALIZERS + "DateSerializer": lambda data: date.fromisoformat(data["value"]),
    SERIALIZERS + "TimeSerializer": _time,
    SERIALIZERS + "DateTimeSerializer": _time,
    SERIALIZERS + "TimeWithZoneSerializer": _time,
    SERIALIZERS + "DurationSerializer": lambda data: timedelta(seconds=data["value"]),
    SERIALIZERS + "BigDecimalSerializer": lambda data: Decimal(data["value"]),
    SERIALIZERS + "ModuleSerializer": lambda data: str(data["value"]),
}


def decode_arguments(arguments: object) -> tuple[list[Any], dict[str, Any]]:
    """An envelope's ``arguments``: the positional arguments and, from a trailing keyword hash, the keyword ones."""
    if type(arguments) is not list:
        raise ActiveJobError(f"the envelope's 'arguments' must be a list, got {type(arguments).__name__}")
    try:
        args = decode(arguments)
    except _Undecodable as error:
        raise ActiveJobError(f"arguments{''.join(reversed(error.path))}: {error}") from None
    if args and type(arguments[-1]) is dict and RUBY2_KEYWORDS in arguments[-1]:
        return args[:-1], {str(key): value for key, value in args[-1].items()}
    return args, {}


class _Undecodable(Exception):
    """A value that does not decode; ``path`` collects where it sits (innermost first) as it propagates out, so
    the common case pays for no path at all."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.path: list[str] = []


def decode(value: Any) -> Any:
    """One serialized argument as a Python value."""
    kind = type(value)
    if kind is list:
        try:
            return [decode(item) for item in value]
        except _Undecodable as error:
            error.path.append(f"[{_first_undecodable(enumerate(value))}]")
            raise
    if kind is not dict:
        return value
    if SERIALIZED in value:
        return _decode_object(value)
    if GLOBALID in value and len(value) == 1:
        return _global_id(value[GLOBALID])
    symbols = value.get(SYMBOL_KEYS) or value.get(RUBY2_KEYWORDS) or ()
    try:
        return {
            (Symbol(key) if key in symbols else key): decode(item) for key, item in value.items() if key not in RESERVED
        }
    except _Undecodable as error:
        error.path.append(f"[{_first_undecodable(value.items())!r}]")
        raise


def _first_undecodable(entries: Iterable[tuple[Any, Any]]) -> Any:
    """The index or key of the first entry that does not decode (only on the error path: decoding again is cheap
    next to keeping track of where the decoding is)."""
    for place, item in entries:
        try:
            decode(item)
        except _Undecodable:
            return place
    return "?"


def _global_id(uri: Any) -> GlobalID:
    try:
        return GlobalID.parse(uri)
    except ActiveJobError as error:
        raise _Undecodable(str(error)) from None


def _decode_object(data: dict[str, Any]) -> Any:
    name = data[SERIALIZED]
    decoder = DECODERS.get(name)
    if decoder is None:
        known = ", ".join(sorted(serializer.removeprefix(SERIALIZERS) for serializer in DECODERS))
        raise _Undecodable(
            f"kiq has no decoder for the ActiveJob serializer {name!r} (it decodes {known}); pass this "
            "argument as one of those types or a JSON value, or run this job in Ruby"
        )
    try:
        return decoder(data)
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        raise _Undecodable(f"a malformed {name} value {data!r}: {exc}") from None


# -- Python -> Ruby ----------------------------------------------------------------------------------------
def encode_arguments(args: tuple[Any, ...], kwargs: dict[str, Any], decimal_serializer: bool) -> list[Any]:
    """``perform_later``'s arguments as ActiveJob serializes them; keyword arguments become the trailing keyword
    hash Ruby passes as keywords. ``decimal_serializer``: Rails 7+'s BigDecimalSerializer, else (Rails 6.1) a
    Decimal travels as its string, as 6.1 itself sends a BigDecimal."""
    encoded = [encode(value, f"args[{index}]", decimal_serializer) for index, value in enumerate(args)]
    if kwargs:
        keywords = _encode_hash(kwargs, "kwargs", decimal_serializer)
        keywords[RUBY2_KEYWORDS] = list(kwargs)
        encoded.append(keywords)
    return encoded


def encode(value: Any, path: str, decimal_serializer: bool) -> Any:
    """One Python value as ActiveJob serializes its Ruby counterpart; anything else is refused, naming ``path``."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return _object("SymbolSerializer", value=str(value)) if isinstance(value, Symbol) else value
    if isinstance(value, Decimal):
        return _object("BigDecimalSerializer", value=str(value)) if decimal_serializer else str(value)
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            raise ActiveJobError(f"{path}: {value!r} has no time zone; Rails needs one (e.g. tzinfo=timezone.utc)")
        return _object("TimeSerializer", value=value.isoformat(timespec="microseconds"))
    if isinstance(value, date):
        return _object("DateSerializer", value=value.isoformat())
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        amount: int | float = int(seconds) if seconds.is_integer() else seconds
        return _object(
            "DurationSerializer", value=amount, parts=[[_object("SymbolSerializer", value="seconds"), amount]]
        )
    if isinstance(value, GlobalID):
        return {GLOBALID: value.uri}
    if isinstance(value, list | tuple):
        return [encode(item, f"{path}[{index}]", decimal_serializer) for index, item in enumerate(value)]
    if isinstance(value, dict):
        encoded = _encode_hash(value, path, decimal_serializer)
        encoded[SYMBOL_KEYS] = [str(key) for key in value if isinstance(key, Symbol)]
        return encoded
    raise ActiveJobError(
        f"{path}: {type(value).__name__} {value!r} has no ActiveJob form; pass None, bool, int, float, str, "
        "Symbol, Decimal, date, aware datetime, timedelta, GlobalID, or lists and str-keyed dicts of them"
    )


def _encode_hash(value: dict[Any, Any], path: str, decimal_serializer: bool) -> dict[str, Any]:
    encoded = {}
    for key, item in value.items():
        if not isinstance(key, str) or key in RESERVED:
            raise ActiveJobError(
                f"{path}: the key {key!r} cannot be an ActiveJob hash key; use str keys (Symbol for a Ruby "
                f"symbol) other than {', '.join(sorted(RESERVED))}"
            )
        encoded[str(key)] = encode(item, f"{path}[{key!r}]", decimal_serializer)
    return encoded


def _object(serializer: str, **fields: Any) -> dict[str, Any]:
    return {SERIALIZED: SERIALIZERS + serializer, **fields}
