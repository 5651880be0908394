"""Job payloads: the JSON that travels through Redis, the strict check that keeps it native JSON, and the check
that a payload read from Redis is a job at all.

Sidekiq's rule is that a job must survive a JSON round trip unchanged; a value that would come back different
(a tuple as a list, a datetime as a string, an int key as a str key, NaN as null) or that cannot be written as
UTF-8 text (a lone surrogate) is refused at push time, with the path to the value, so the mistake shows where it
was made and not in a worker hours later.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import math
import secrets
import uuid
from collections.abc import Iterable
from typing import Any, Literal

from .errors import InvalidJobError, InvalidPayload, JobArgumentError

try:  # the ``fast`` extra: ~5x faster JSON; the stdlib does what orjson refuses or would change
    import orjson
except ImportError:  # pragma: no cover - depends on the installation
    orjson = None  # type: ignore[assignment]

_std_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_std_dumps_ascii = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode
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
    """Compact JSON as Sidekiq writes it, for what kiq writes other than a push: a payload read from Redis and
    written again (a retry, the dead set, a recovered job), the process registry. Never fails on a lone surrogate
    (bytes that were not UTF-8, read with surrogateescape, or a ``\\ud800`` escape), and the text is always valid
    UTF-8: such a payload is written with ASCII escapes (``\\udc80``), which read back as the same string. The push
    path refuses such text instead (``encode_checked``).
    """
    if orjson is not None:
        try:
            return orjson.dumps(payload, option=_ORJSON_OPTIONS).decode()
        except TypeError:  # an integer beyond 64 bits, a non-str key, a lone surrogate: the stdlib encodes or refuses
            pass
    text = _std_dumps(payload)
    if text.isascii() or is_utf8(text):
        return text
    return _std_dumps_ascii(payload)


# a text longer than this (characters) goes to the stdlib, which makes no copy besides the values it returns: the
# orjson path copies it three times (UTF-8, its digits mapped, orjson's own buffer), 4x a big job's payload at once
# for a worker, where the stdlib is as fast on such texts (0.21 s against 0.27 s for 100 MB)
LARGE_TEXT = 1 << 20


def loads(text: str) -> Any:
    """Decode JSON as the stdlib does (exact big integers, ``NaN``, lone surrogates), faster with orjson."""
    if orjson is not None:
        if len(text) > LARGE_TEXT:
            return _std_loads(text)
        data = text.encode("utf-8", "surrogatepass")
        if _LONG_NUMBER not in data.translate(_DIGITS_TO_ZERO):
            try:
                return orjson.loads(data)
            except orjson.JSONDecodeError:
                pass  # the stdlib accepts a few things orjson does not, or raises the usual error
    return _std_loads(text)


# the fields of a running job that the process registry shows when the job is too large to copy there
SUMMARY_FIELDS = ("class", "wrapped", "jid", "queue", "retry", "retry_count", "bid", "created_at", "enqueued_at")


def running_summary(job: dict[str, Any], jobstr: str) -> str:
    """The ``payload`` of a running job's ``<identity>:work`` entry when its JSON is over ``LARGE_TEXT``: its small
    fields, its arguments replaced by one note. Each heartbeat writes the entry anew, and encoding the whole payload
    there would hold four more copies of it at once (JSON, text, UTF-8, the packed command)."""
    summary = {key: job[key] for key in SUMMARY_FIELDS if key in job}
    summary["args"] = [f"({len(jobstr):,} characters of JSON: too large to show while it runs)"]
    return dumps(summary)


def new_jid() -> str:
    """A job id as Sidekiq makes it: 12 random bytes in hex (24 characters)."""
    return secrets.token_hex(12)


def new_public_id() -> str:
    """128 random bits, URL-safe (22 characters), for ids that grant reading something (a batch's bid, a workflow's
    id); never starting with ``-``, which a command line (``kiq batches ID``) would take for an option."""
    while True:
        token = secrets.token_urlsafe(16)
        if token[0] != "-":
            return token


def new_jids(count: int) -> list[str]:
    """``count`` job ids from one read of the system's random source (push_bulk makes thousands)."""
    digits = secrets.token_hex(12 * count)
    return [digits[start : start + 24] for start in range(0, 24 * count, 24)]


def finite_seconds(value: object, what: str) -> float:
    """``value`` as float seconds. A bool, a non-number, NaN or ±inf is refused, naming ``what`` and the value:
    a NaN time would run the job at once and an infinite one never."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidJobError(f"{what} must be a number of seconds, got {_shown(value)}")
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    if not math.isfinite(seconds):
        raise InvalidJobError(f"{what} must be a finite number of seconds, got {_shown(value)}")
    return seconds


# Sidekiq's defaults for a job's options (a payload that lacks them gets these)
DEFAULT_OPTIONS: dict[str, Any] = {"retry": True, "queue": "default"}

# The payload times Sidekiq 8 writes as integer milliseconds (6.x/7.x, and kiq by default: float seconds).
WIRE_TIME_FIELDS = ("created_at", "enqueued_at", "failed_at", "retried_at", "discarded_at")
# the latest time shown as a date (datetime's limit, year 9999): past it a value is not a time but a unit mix-up
_LAST_EPOCH = 253_402_300_799.0


def epoch_seconds(value: Any, integers: Literal["ms", "seconds"] = "ms") -> float | None:
    """A time read from Redis as float epoch seconds, or None when missing or not a time.

    For the payload times (``WIRE_TIME_FIELDS``) Sidekiq 8's rule (``api.rb`` ``time_from_timestamp``): a JSON
    float is seconds (Sidekiq 6.x/7.x, kiq), an integer is milliseconds (8.x). ``integers="seconds"`` is for
    the times Sidekiq keeps in seconds whatever their type (a work entry's ``run_at``, ``Time.now.to_i``).
    A bool, a string, NaN or infinity, or a time before 1970 or after 9999 is None: one bad field written by
    another producer makes that time unknown, never a page or a listing that fails."""
    kind = type(value)
    if kind is int:  # compared as an int first: one too large for a float would overflow the division
        scale = 1000 if integers == "ms" else 1
        return value / scale if 0 <= value <= _LAST_EPOCH * scale else None
    if kind is float:
        return value if 0.0 <= value <= _LAST_EPOCH else None  # NaN fails both comparisons
    return None  # None, bool (an int subclass: the exact type check leaves it out), a string, a list...


def wire_time(seconds: float, sidekiq_wire: int) -> float | int:
    """A payload time (``WIRE_TIME_FIELDS``) as kiq writes it: float epoch seconds, which Sidekiq 6.x, 7.x and
    8.x all read; with ``sidekiq_wire = 8``, integer milliseconds, Sidekiq 8's own form (for fleets of 8.x only:
    Sidekiq 7 would read them as seconds, tens of thousands of years ahead)."""
    return int(seconds * 1000) if sidekiq_wire == 8 else seconds


# -- reading a payload from Redis ---------------------------------------------------------------------------
def payload_problem(job: Any) -> str | None:
    """What makes a decoded payload unrunnable, or None: Sidekiq's shape, checked the same way by the processor,
    the poller and reliable-fetch recovery."""
    if type(job) is not dict:
        return "a job must be a JSON object"
    name = job.get("class")
    if type(name) is not str or not name:
        return f"'class' must be a non-empty string, got {name!r:.80}"
    if type(job.get("args")) is not list:
        return f"'args' must be a list, got {job.get('args')!r:.80}"
    queue = job.get("queue", "default")
    if type(queue) is not str or not queue:
        return f"'queue' must be a non-empty string, got {queue!r:.80}"
    jid = job.get("jid", "")
    if type(jid) is not str:
        return f"'jid' must be a string, got {jid!r:.80}"
    return None


def parse_payload(value: str) -> dict[str, Any]:
    """The job of a raw payload; InvalidPayload says why there is none."""
    if not is_utf8(value):
        raise InvalidPayload("the payload is not valid UTF-8")
    try:
        job = loads(value)
    except (ValueError, RecursionError) as exc:
        raise InvalidPayload(f"the payload is not valid JSON: {exc}") from None
    problem = payload_problem(job)
    if problem is not None:
        raise InvalidPayload(problem)
    return job  # type: ignore[no-any-return]


def parse_job(value: str) -> dict[str, Any] | None:
    """The payload dict of a raw value, or None when it is not a JSON object (or not UTF-8)."""
    if not is_utf8(value):
        return None
    try:
        item = loads(value)
    except (ValueError, RecursionError):
        return None
    return item if isinstance(item, dict) else None


def printable(value: str) -> str:
    """A raw value fit to print or show: bytes that are not UTF-8 as ``\\xff`` escapes."""
    return value if is_utf8(value) else value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# -- the strict check ---------------------------------------------------------------------------------------
_SCALARS = frozenset((str, bool, int, type(None)))
_HINTS: dict[type, str] = {tuple: "; use a list", set: "; use a sorted list", frozenset: "; use a sorted list"}
_CONVERTED = (uuid.UUID, decimal.Decimal, datetime.date, datetime.time, datetime.timedelta)
_NATIVE = "native JSON types (str, int, float, bool, None, list, dict with str keys)"
Path = tuple[int | str, ...]  # where a value sits: the payload's field, then list indexes and dict keys


def check_job(job: dict[str, Any]) -> None:
    """Raise JobArgumentError naming the first value of the payload that is not native JSON, and where it sits
    (``args[1]['k']``, ``payload['tags'][0]``). Lone surrogates are left to ``encode_checked``, which finds them
    for free."""
    try:
        _check(job)
    except _NotNative as refused:
        raise _job_error(job.get("class"), refused) from None


def check_args(args: list[Any], job_name: str, kwargs: dict[str, Any] | None = None) -> None:
    """``check_job`` for the arguments alone (and the keyword arguments), when the other fields are known to be
    checked."""
    field = "args"
    try:
        _check(args)
        if kwargs is not None:
            field = "kwargs"
            _check(kwargs)
    except _NotNative as refused:
        refused.path = (field, *refused.path)
        raise _job_error(job_name, refused) from None


def check_options(options: dict[str, Any], owner: str) -> None:
    """Options travel in every payload: the checks of a push, lone surrogates included, when the options are
    written (``kiq_options``, ``set()``), so the mistake shows there."""
    try:
        _check(options)
    except _NotNative as refused:
        raise JobArgumentError(f"{owner}: options must be {_NATIVE}, but {refused.describe('options')}") from None
    surrogate = _lone_surrogate(options, ())
    if surrogate is not None:
        raise JobArgumentError(f"{owner}: options must be {_NATIVE}, but {surrogate.describe('options')}")


def encode_checked(job: dict[str, Any]) -> str:
    """The push path's encoder, for a payload that passed ``check_job``: compact JSON text that is valid UTF-8.
    A lone surrogate, which UTF-8 cannot carry, is a JobArgumentError naming it.

    Text, not orjson's bytes: a push_bulk holds thousands of encoded jobs until it writes them, and holding orjson's
    bytes objects costs about 1.5 µs a job more than small str objects (measured); a single push gains ~40 ns."""
    if orjson is not None:
        try:
            return orjson.dumps(job, option=_ORJSON_OPTIONS).decode()
        except TypeError:  # an integer beyond 64 bits (the stdlib writes it exactly) or a lone surrogate
            pass
    text = _std_dumps(job)
    if text.isascii() or is_utf8(text):
        return text
    surrogate = _lone_surrogate(job, ())
    assert surrogate is not None, "the walk finds what UTF-8 refused"
    raise _job_error(job.get("class"), surrogate)


class _NotNative(Exception):
    """A value that is not native JSON, where a walk found it. ``_check`` builds the path on the way out, so the
    usual walk, which finds nothing, builds none; the caller words the JobArgumentError for what it checked."""

    def __init__(self, value: Any, why: str, key: bool = False, path: Path = ()) -> None:
        super().__init__(why)
        self.value, self.why, self.key, self.path = value, why, key, path

    def describe(self, root: str) -> str:
        path = self.path[1:] if root in ("args", "kwargs") else self.path
        where = root + "".join(f"[{part!r}]" if isinstance(part, str) else f"[{part}]" for part in path)
        if self.key:
            return f"{where} has the key {_shown(self.value)}, which {self.why}"
        return f"{where} = {_shown(self.value)} {self.why}"


def _job_error(name: Any, refused: _NotNative) -> JobArgumentError:
    label = name if isinstance(name, str) and name.isprintable() else _shown(name)
    if refused.path[:1] == ("args",):
        return JobArgumentError(f"Job arguments to {label} must be {_NATIVE}, but {refused.describe('args')}")
    if refused.path[:1] == ("kwargs",) and len(refused.path) > 1:
        return JobArgumentError(
            f"Keyword argument {refused.path[1]!r} to {label} must be {_NATIVE}, but {refused.describe('kwargs')}"
        )
    return JobArgumentError(f"The payload of {label} must be {_NATIVE}, but {refused.describe('payload')}")


def _check(value: Any) -> None:
    """Raise _NotNative at the first value in ``value`` (a list or dict; anything else is refused) that is not
    native JSON. Scalars and finite floats are passed over in the loops: they are most values, and the walk is on
    the path of every push."""
    kind = type(value)
    if kind is list:
        for index, item in enumerate(value):
            kind = type(item)
            if kind in _SCALARS or (kind is float and item - item == 0.0):  # NaN and ±inf give NaN
                continue
            try:
                _check(item)
            except _NotNative as refused:
                refused.path = (index, *refused.path)
                raise
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise _NotNative(key, f"is of type {type(key).__name__}; JSON object keys are strings", key=True)
            kind = type(item)
            if kind in _SCALARS or (kind is float and item - item == 0.0):
                continue
            try:
                _check(item)
            except _NotNative as refused:
                refused.path = (key, *refused.path)
                raise
        return
    if kind is float:
        raise _NotNative(value, "is not a finite number (JSON has no NaN or Infinity)")
    raise _NotNative(
        value, f"is a {kind.__name__}, not a native JSON type{_HINTS.get(kind) or _annotation_hint(value)}"
    )


def _annotation_hint(value: Any) -> str:
    """For a value kiq converts when ``perform``'s parameter says its type (kiq.arguments): how to pass it."""
    if isinstance(value, _CONVERTED) or dataclasses.is_dataclass(value) or isinstance(value, enum.Enum):
        name = type(value).__name__
        return (
            f"; annotate its parameter in perform (e.g. `value: {name}`) and kiq sends its JSON form and gives "
            f"perform a {name} back (docs/guide/jobs.md, typed arguments)"
        )
    return ""


def _lone_surrogate(value: Any, path: Path) -> _NotNative | None:
    """The first string (or dict key) in ``value`` that UTF-8 cannot encode, or None; the slow path only."""
    kind = type(value)
    if kind is str:
        return None if is_utf8(value) else _NotNative(value, _why_not_utf8(value), path=path)
    if kind is list:
        items: Iterable[tuple[int | str, Any]] = enumerate(value)
    elif kind is dict:
        items = value.items()
    else:
        return None  # numbers, booleans, None
    for step, item in items:
        if type(step) is str and not is_utf8(step):
            return _NotNative(step, _why_not_utf8(step), key=True, path=path)
        found = _lone_surrogate(item, (*path, step))
        if found is not None:
            return found
    return None


def is_utf8(text: str) -> bool:
    """False when ``text`` holds a lone surrogate: from bytes that were not UTF-8 (replies are read with
    surrogateescape, see kiq.redis), or from a ``\\ud800`` escape without its pair."""
    if text.isascii():  # O(1) in CPython: most payloads stop here
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _why_not_utf8(text: str) -> str:
    index, char = next((index, char) for index, char in enumerate(text) if "\ud800" <= char <= "\udfff")
    return (
        f"is not UTF-8 text: it holds the lone surrogate U+{ord(char):04X} at index {index} (bytes that were not "
        "UTF-8, or a \\ud800-style escape without its pair)"
    )


def _shown(value: Any) -> str:
    shown = repr(value)  # escapes lone surrogates, so the message itself is always UTF-8
    return shown if len(shown) <= 80 else shown[:77] + "..."
