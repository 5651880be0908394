"""Job payloads: the JSON that travels through Redis, and the strict check that keeps it native JSON.

Sidekiq's rule is that arguments must survive a JSON round trip unchanged; a value that would come back
different (a tuple as a list, a datetime as a string, an int key as a str key) is refused at push time,
with the path to the value, so the mistake shows where it was made and not in a worker hours later.
"""

from __future__ import annotations

import json
import math
import secrets
from typing import Any, NoReturn

from .errors import JobArgumentError

try:  # the ``fast`` extra: ~5x faster JSON; the stdlib does what orjson refuses or would change
    import orjson
except ImportError:  # pragma: no cover - depends on the installation
    orjson = None  # type: ignore[assignment]

_std_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_std_loads = json.loads
# datetimes, dataclasses and subclasses of builtins go to the stdlib, which refuses or encodes them as before
_ORJSON_OPTIONS = (
    (orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS)
    if orjson is not None
    else 0
)
# orjson reads an integer beyond 64 bits as a float; Ruby and the stdlib keep it exact. Such a number has 19 or
# more digits in a row, which this finds cheaply (all digits mapped to "0", then one substring search).
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19


def dumps(payload: dict[str, Any]) -> str:
    """Encode a job payload the way Sidekiq does: compact JSON, UTF-8 text."""
    if orjson is not None:
        try:
            return orjson.dumps(payload, option=_ORJSON_OPTIONS).decode()
        except TypeError:  # e.g. an integer beyond 64 bits, a non-str key: the stdlib encodes or refuses it
            pass
    return _std_dumps(payload)


def loads(text: str) -> Any:
    """Decode JSON as the stdlib does (exact big integers, ``NaN``, lone surrogates), faster with orjson."""
    if orjson is not None:
        data = text.encode("utf-8", "surrogatepass")
        if _LONG_NUMBER not in data.translate(_DIGITS_TO_ZERO):
            try:
                return orjson.loads(data)
            except orjson.JSONDecodeError:
                pass  # the stdlib accepts a few things orjson does not, or raises the usual error
    return _std_loads(text)


def new_jid() -> str:
    """A job id as Sidekiq makes it: 12 random bytes in hex (24 characters)."""
    return secrets.token_hex(12)


def new_jids(count: int) -> list[str]:
    """``count`` job ids from one read of the system's random source (push_bulk makes thousands)."""
    digits = secrets.token_hex(12 * count)
    return [digits[start : start + 24] for start in range(0, 24 * count, 24)]


_SCALARS = (str, bool, int, type(None))
_HINTS: dict[type, str] = {tuple: "; use a list", set: "; use a sorted list", frozenset: "; use a sorted list"}
Path = tuple[int | str, ...]  # where a value sits in the args: list indexes and dict keys


def check_args(args: list[Any], job_name: str) -> None:
    """Raise JobArgumentError naming the first argument that is not JSON-native, and where it sits."""
    for index, value in enumerate(args):
        if type(value) not in _SCALARS:  # most arguments are scalars: no path is built for them
            _check(value, (index,), job_name)


def _check(value: Any, path: Path, job_name: str) -> None:
    kind = type(value)
    if kind is float:
        if math.isfinite(value):
            return
        _refuse(value, path, job_name, "is not a finite number (JSON has no NaN or Infinity)")
    if kind is list:
        for index, item in enumerate(value):
            if type(item) not in _SCALARS:
                _check(item, (*path, index), job_name)
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                _refuse(key, path, job_name, f"is a key of type {type(key).__name__}; JSON object keys are strings")
            if type(item) not in _SCALARS:
                _check(item, (*path, key), job_name)
        return
    hint = _HINTS.get(kind, "")
    _refuse(value, path, job_name, f"is a {kind.__name__}, not a native JSON type{hint}")


def _refuse(value: Any, path: Path, job_name: str, why: str) -> NoReturn:
    where = "args" + "".join(f"[{part!r}]" if isinstance(part, str) else f"[{part}]" for part in path)
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    raise JobArgumentError(
        f"Job arguments to {job_name} must be native JSON types (str, int, float, bool, None, list, "
        f"dict with str keys), but {where} = {shown} {why}"
    )
