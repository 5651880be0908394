"""A job's result typed by ``perform``'s return annotation, as its arguments are by theirs (kiq.arguments).

A job annotated ``-> Decimal`` (or ``datetime``, ``UUID``, a dataclass, ... : the types kiq.arguments converts)
returns its value; a plugin that keeps or passes results on (results, workflow) stores ``result_form`` of it, its
JSON form, and a reader gets ``result_value`` of that form: the annotated type again. A job without a return
annotation, or annotated with JSON's own types, is untouched: its value must be strict JSON, as before.

The same msgspec conversion as the arguments', so a value reads back exactly as a parameter of that type would.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

from .arguments import Converter, converter_for, shown
from .errors import KiqError
from .plan import plan_of


class ResultTypeError(KiqError, TypeError):
    """A job's return value that its return annotation cannot take (``result_form``), or a stored result that cannot
    be read as that annotation (``result_value``: another producer wrote it, or the annotation changed); the message
    names the job, the type and the value."""


class ResultConverter(Converter):
    """The return annotation's converter: its errors speak of the job's result, not of an argument."""

    __slots__ = ()

    def _refused(self, owner: str, where: str, value: Any, why: str) -> KiqError:
        return ResultTypeError(
            f"{owner} returned {shown(value)}, but its return annotation is {self.shown}: {why}; return a "
            f"{self.shown} (or change the annotation)"
        )

    def _unreadable(self, owner: str, where: str, wire: Any, why: str) -> KiqError:
        return ResultTypeError(
            f"{owner}: the stored result {shown(wire)} cannot be read as {self.shown} (its return annotation): {why}"
        )


class ResultType:
    """How a job class's result converts, from its function's return annotation. Read at the first use: an
    annotation naming a class defined later in its module (a forward reference) resolves by then."""

    __slots__ = ("_converter", "_function", "_resolved", "owner")

    def __init__(self, function: Callable[..., Any], owner: str) -> None:
        self._function = function
        self.owner = owner
        self._converter: Converter | None = None
        self._resolved = False

    def converter(self) -> Converter | None:
        """The converter, or None when the annotation is JSON's own or not one kiq converts (an arbitrary class)."""
        if not self._resolved:
            try:
                annotation = typing.get_type_hints(self._function, include_extras=True).get("return")
            except Exception:  # an annotation that does not resolve: the result is left unconverted
                annotation = None
            self._converter = converter_for("return", annotation, ResultConverter)
            self._resolved = True
        return self._converter


def result_type_for(function: Callable[..., Any], owner: str) -> ResultType | None:
    """The result type of a job running ``function``, or None when it has no return annotation."""
    if "return" not in getattr(function, "__annotations__", {}):
        return None
    return ResultType(function, owner)


def _converter_of(job_class: type) -> tuple[Converter, str] | None:
    result = plan_of(job_class).result
    converter = None if result is None else result.converter()
    return None if converter is None or result is None else (converter, result.owner)


def result_form(job_class: type, value: Any) -> Any:
    """The JSON form of ``value``, returned by a ``job_class`` job, by its return annotation (``value`` itself when
    it has none that converts). Raises ``ResultTypeError`` when the value cannot be the annotated type."""
    found = _converter_of(job_class)
    if found is None:
        return value
    return found[0].encode(value, found[1], "its result")


def result_value(job_class: type, wire: Any) -> Any:
    """A stored result of a ``job_class`` job read back as its return annotation (``wire`` itself when it has none
    that converts). Raises ``ResultTypeError`` naming the type when it cannot be one."""
    found = _converter_of(job_class)
    if found is None:
        return wire
    return found[0].decode(wire, found[1], "its result")
