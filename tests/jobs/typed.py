"""Jobs with keyword and typed arguments (kiq.arguments): each records what ``perform`` received, as the ``repr``
of its arguments by name, sorted (types and values both show), under its ``key`` argument: in ``received`` here, for the
in-process runs (fake, inline), and in the worker's Redis hash ``received``."""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, TypedDict
from uuid import UUID

import kiq

received: dict[str, str] = {}


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Order:
    id: UUID
    total: Decimal
    placed: datetime
    lines: list[Line]


class Line(TypedDict):
    sku: UUID
    day: date


def _record(arguments: dict[str, Any]) -> None:
    arguments.pop("self", None)
    shown = repr(sorted(arguments.items()))
    received[arguments["key"]] = shown
    kiq.default_config().redis.hset("received", arguments["key"], shown)


@kiq.job(name="TypedSync")
def typed_sync(
    key: str,
    id: UUID,
    amount: Decimal,
    *days: date,
    when: datetime,
    at: time,
    wait: timedelta,
    color: Color,
    order: Order,
    line: Line,
    totals: dict[str, Decimal],
    maybe: UUID | None = None,
    plain: int = 0,
    **more: datetime,
) -> None:
    _record(locals())


class TypedAsync(kiq.Job):
    """``typed_sync``'s async twin, as a class."""

    kiq_name = "TypedAsync"

    async def perform(
        self,
        key: str,
        id: UUID,
        amount: Decimal,
        *days: date,
        when: datetime,
        at: time,
        wait: timedelta,
        color: Color,
        order: Order,
        line: Line,
        totals: dict[str, Decimal],
        maybe: UUID | None = None,
        plain: int = 0,
        **more: datetime,
    ) -> None:
        _record(locals())


class Keywords(kiq.Job):
    """Keyword arguments without annotations: passed as they are."""

    kiq_name = "Keywords"

    def perform(self, key: str, amount: int = 1, *, note: str = "") -> None:
        _record(locals())


class Later(kiq.Job):
    """Its annotation names a class defined below it: the plan is read at its first push or run."""

    kiq_name = "TypedLater"

    def perform(self, key: str, stamp: Stamp, note: Unknown = None) -> None:  # type: ignore[name-defined]  # noqa: F821
        _record(locals())


@dataclasses.dataclass
class Stamp:
    at: datetime


def expected(job: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """What ``job`` records for a push of ``args`` and ``kwargs``: the same objects, bound to its parameters."""
    function = job.function if isinstance(job, kiq.JobFunction) else functools.partial(job.perform, None)
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    return repr(sorted(bound.arguments.items()))
