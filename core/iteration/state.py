"""An iterable job's state in Redis: the hash ``it-<jid>``, field for field as Sidekiq writes it.

Sidekiq 7.3+ (lib/sidekiq/job/iterable.rb: ``flush_state``, ``fetch_previous_iteration_state``, ``cancel!``,
``cleanup``) keeps, per job id:

- ``ex``: how many times the job started (executions), an integer;
- ``c``: the cursor of the last item handed out, as compact JSON (``null`` before the first item);
- ``rt``: seconds the finished executions ran (an integer ``0`` until one finished, then a float, as Ruby prints it);
- ``cancelled``: epoch seconds (an integer) when someone cancelled the job; set once (``HSETNX``), never cleared.

A flush is one ``MULTI``: ``HSET`` the three fields, ``EXPIRE it-<jid> 2592000 NX`` (the 30 days start at the first
write and are not pushed back by later ones, as Sidekiq 8 does it) and ``HGET cancelled``, so every flush also tells
whether the job was cancelled meanwhile. Redis 6.2 (the embedded server) has no ``EXPIRE ... NX``: there the TTL is
set by a plain ``EXPIRE``, as Sidekiq 7.3 does it (its TODO awaits Redis 7); the server's version is asked once per
client. Completion ``UNLINK``s the hash. Each write has a sync and an asyncio form:
the commands are queued by one function, the round trip is the only difference. On a Redis Cluster the hash is
``{kiq}it-<jid>`` (``key_of``: kiq's shared slot), one key per transaction.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast
from weakref import WeakKeyDictionary

from redis.exceptions import ResponseError

from ..keys import ITERATION_TTL, iteration_key, keyspace
from ..redis import ENCODING_ERRORS

if TYPE_CHECKING:
    import redis
    import redis.asyncio as redis_async
    from redis.asyncio.client import Pipeline as AsyncPipeline
    from redis.client import Pipeline

EXECUTIONS = "ex"
CURSOR = "c"
RUNTIME = "rt"
CANCELLED = "cancelled"

_Number = TypeVar("_Number", int, float)

# per Redis client: does its server take EXPIRE's NX flag (Redis >= 7.0)?
_expire_nx: WeakKeyDictionary[object, bool] = WeakKeyDictionary()


def key_of(redis: Any, jid: str) -> str:
    """The state hash of ``jid`` on ``redis`` (``it-<jid>`` on a standalone server)."""
    return keyspace(redis).key(iteration_key(jid))


def _takes_nx(info: dict[str, Any]) -> bool:
    version = str(info.get("redis_version", "0"))
    return int(version.split(".")[0] or 0) >= 7


def expire_nx(redis: redis.Redis) -> bool:
    known = _expire_nx.get(redis)
    if known is None:
        known = _expire_nx[redis] = _takes_nx(redis.info("server"))
    return known


async def aexpire_nx(redis: redis_async.Redis) -> bool:
    known = _expire_nx.get(redis)
    if known is None:
        known = _expire_nx[redis] = _takes_nx(await redis.info("server"))
    return known


@dataclass(frozen=True, slots=True)
class IterationState:
    """What ``it-<jid>`` says about a running (or interrupted) iterable job."""

    jid: str
    executions: int  # times the job started; 1 during its first run
    cursor: Any  # the JSON cursor of the last item handed out (None before the first)
    runtime: float  # seconds its finished executions ran (the running one not included)
    cancelled_at: int | None  # epoch seconds of the cancellation, None when not cancelled

    @property
    def cancelled(self) -> bool:
        return self.cancelled_at is not None


def encode_cursor(cursor: Any) -> str:
    """The cursor as Sidekiq's ``dump_json`` writes it (compact, UTF-8 as is); a cursor that is not JSON-native
    is refused with a clear error before anything is written. A string holding a lone surrogate (``"\\ud800"`` read
    from a hash another producer wrote) has no UTF-8 form: such a cursor is written with ASCII escapes instead."""
    try:
        text = json.dumps(cursor, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"an iteration cursor must be JSON-native (None, bool, int, float, str, list, dict with str keys), "
            f"got {cursor!r:.100}: {exc}; yield (item, cursor) with a cursor such as an id, an offset or a list of them"
        ) from None
    try:
        text.encode("utf-8", ENCODING_ERRORS)  # as the client will send it
    except UnicodeEncodeError:
        return json.dumps(cursor, separators=(",", ":"), allow_nan=False)
    return text


def ruby_number(value: int | float) -> str:
    """A number as Ruby's ``to_s`` prints it (how redis-client sends it): ``0``, ``12.5``, ``1.0e-05``."""
    if isinstance(value, int) or not math.isfinite(value):
        return str(value)
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:
        return f"{mantissa}.0e{exponent}"
    return text


def parse(jid: str, fields: dict[str, str], key: str | None = None) -> IterationState | None:
    """The state held in the hash's ``fields`` (None when the hash does not exist); ``key``, the hash's key (default
    ``it-<jid>``), names it in an error."""
    if not fields:
        return None
    raw_cursor = fields.get(CURSOR)
    try:
        cursor = None if raw_cursor is None else json.loads(raw_cursor)
    except ValueError as exc:
        if fields.get(CANCELLED) is not None:
            cursor = None  # a cancelled job does not walk: it completes as cancelled without its cursor
        else:
            raise ValueError(
                f"{key or iteration_key(jid)} holds a cursor that is not JSON ({raw_cursor!r:.100}: {exc}); delete the "
                "hash to restart the job from the beginning, or write a valid cursor"
            ) from None
    return IterationState(
        jid=jid,
        executions=_number(fields.get(EXECUTIONS), int),
        cursor=cursor,
        runtime=_number(fields.get(RUNTIME), float),
        cancelled_at=None if fields.get(CANCELLED) is None else _number(fields[CANCELLED], int),
    )


def _number(text: str | None, kind: type[_Number]) -> _Number:
    """Ruby's lenient ``to_i``/``to_f`` of a field: what is not a finite number ("x", "NaN", "inf") reads as 0,
    as Sidekiq reads it (Ruby's ``"NaN".to_f`` is 0.0)."""
    try:
        number = float(text) if text is not None else 0.0
    except ValueError:
        return kind(0)
    return kind(number) if math.isfinite(number) else kind(0)


def read(redis: redis.Redis, jid: str) -> IterationState | None:
    """The state of the iterable job ``jid``, or None when it has none (never ran, completed, or expired)."""
    key = key_of(redis, jid)
    try:
        return parse(jid, cast("dict[str, str]", redis.hgetall(key)), key)  # kiq's clients decode
    except ResponseError as exc:
        raise _not_a_hash(key, exc) from None


async def aread(redis: redis_async.Redis, jid: str) -> IterationState | None:
    key = key_of(redis, jid)
    try:
        return parse(jid, cast("dict[str, str]", await redis.hgetall(key)), key)
    except ResponseError as exc:
        raise _not_a_hash(key, exc) from None


def _not_a_hash(key: str, exc: ResponseError) -> Exception:
    """``WRONGTYPE``: another program's key has the name; anything else as it was."""
    if not str(exc).startswith("WRONGTYPE"):
        return exc
    return ValueError(
        f"{key} is not a hash ({exc}): another program uses this key name; rename or delete it, and "
        "the job starts from the beginning"
    )


def _queue_flush(pipe: Pipeline | AsyncPipeline, key: str, progress: tuple[int, Any, float], nx: bool) -> None:
    executions, cursor, runtime = progress
    fields = {EXECUTIONS: str(executions), CURSOR: encode_cursor(cursor), RUNTIME: ruby_number(runtime)}
    pipe.hset(key, mapping=fields)  # type: ignore[arg-type]  # redis-py types the mapping's values too narrowly
    pipe.expire(key, ITERATION_TTL, nx=nx)
    pipe.hget(key, CANCELLED)


def flush(redis: redis.Redis, jid: str, executions: int, cursor: Any, runtime: float) -> bool:
    """Write the job's progress; True when the job was cancelled meanwhile."""
    nx = expire_nx(redis)
    with redis.pipeline(transaction=True) as pipe:
        _queue_flush(pipe, key_of(redis, jid), (executions, cursor, runtime), nx)
        return pipe.execute()[-1] is not None


async def aflush(redis: redis_async.Redis, jid: str, executions: int, cursor: Any, runtime: float) -> bool:
    nx = await aexpire_nx(redis)
    async with redis.pipeline(transaction=True) as pipe:
        _queue_flush(pipe, key_of(redis, jid), (executions, cursor, runtime), nx)
        return (await pipe.execute())[-1] is not None


def _queue_cancel(pipe: Pipeline | AsyncPipeline, key: str, nx: bool) -> None:
    pipe.hsetnx(key, CANCELLED, str(int(time.time())))
    pipe.hget(key, CANCELLED)
    pipe.expire(key, ITERATION_TTL, nx=nx)  # a job not started yet keeps the mark as long as a started one


def cancel(redis: redis.Redis, jid: str) -> int:
    """Mark ``jid`` cancelled (a second call keeps the first time); returns the epoch seconds of the cancellation."""
    nx = expire_nx(redis)
    with redis.pipeline(transaction=True) as pipe:
        _queue_cancel(pipe, key_of(redis, jid), nx)
        return _number(pipe.execute()[1], int)


async def acancel(redis: redis_async.Redis, jid: str) -> int:
    nx = await aexpire_nx(redis)
    async with redis.pipeline(transaction=True) as pipe:
        _queue_cancel(pipe, key_of(redis, jid), nx)
        return _number((await pipe.execute())[1], int)


def clear(redis: redis.Redis, jid: str) -> None:
    """The job completed (or was cancelled): its state goes."""
    redis.unlink(key_of(redis, jid))


async def aclear(redis: redis_async.Redis, jid: str) -> None:
    await redis.unlink(key_of(redis, jid))
