"""Job arguments beyond Sidekiq's list of JSON values: keyword arguments, and typed values that ``perform``'s
annotations convert.

On the wire a job keeps Sidekiq's ``args`` (a JSON list, what a Ruby worker's ``perform(*args)`` receives); keyword
arguments travel in a top-level ``"kwargs"`` object, written only when there are some, so a payload without them is
what it always was. A parameter annotated with a type JSON lacks (``UUID``, ``Decimal``, an aware ``datetime``,
``date``, ``time``, ``timedelta``, an ``Enum``, a dataclass or TypedDict of those, and ``list``/``dict``/``Optional``
of them) is written in its JSON form (ISO strings, strings, objects) at push and read back as the annotated type
before ``perform`` runs. msgspec does both conversions (docs/architecture.md says why it was chosen).

An ``ArgumentPlan`` says which parameters convert; it is made once per job class, from its signature. A class
whose parameters are unannotated or annotated with JSON's own types has none, and its pushes and runs pay nothing
for this module but one attribute read.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import inspect
import types
import typing
import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from .errors import ArgumentError, JobArgumentError, KiqError
from .plan import plan_of

# the types whose instances a value is checked to be exactly, then written without a validating round trip
_SCALARS: tuple[type, ...] = (uuid.UUID, decimal.Decimal, datetime.datetime, datetime.date, datetime.time,
                              datetime.timedelta)  # fmt: skip
_NATIVE: frozenset[Any] = frozenset({str, int, float, bool, type(None), typing.Any, object, list, dict})
_UNIONS = (typing.Union, types.UnionType)


class Converter:
    """One typed parameter: its JSON form at push (checked to read back), its value again in the worker."""

    __slots__ = ("annotation", "exact", "name", "shown", "with_datetime")

    def __init__(self, name: str, annotation: Any, with_datetime: bool) -> None:
        self.name = name
        self.annotation = annotation
        self.exact = annotation if isinstance(annotation, type) and _is_scalar(annotation) else None
        self.with_datetime = with_datetime  # a datetime somewhere inside: naive ones are refused
        self.shown = _type_name(annotation)

    def encode(self, value: Any, owner: str, where: str) -> Any:
        """``value``'s JSON form; JobArgumentError when it is not one the annotation reads back."""
        if type(value) is self.exact:  # the annotated class itself: written as is, checked for a zone only
            if self.with_datetime and _is_naive(value):
                raise self._refused(owner, where, value, _NAIVE)
            return msgspec.to_builtins(value)
        try:
            wire = msgspec.to_builtins(value)
            msgspec.convert(wire, self.annotation)
        except (TypeError, msgspec.ValidationError) as exc:
            raise self._refused(owner, where, value, str(exc)) from None
        if self.with_datetime:
            naive = _naive_in(value, "")
            if naive is not None:
                raise self._refused(owner, where, value, f"{_NAIVE} (at {naive or 'the value'})")
        return wire

    def decode(self, wire: Any, owner: str, where: str) -> Any:
        """The annotated value of ``wire`` (read from a payload); ArgumentError when it cannot be one."""
        try:
            value = msgspec.convert(wire, self.annotation)
        except msgspec.ValidationError as exc:
            raise self._unreadable(owner, where, wire, str(exc)) from None
        if self.with_datetime:
            naive = _naive_in(value, "")
            if naive is not None:
                raise self._unreadable(owner, where, wire, f"{_NAIVE} (at {naive or 'the value'})")
        return value

    def _refused(self, owner: str, where: str, value: Any, why: str) -> KiqError:
        return JobArgumentError(
            f"{owner}: argument {self.name!r} ({where}) is annotated {self.shown}, but {shown(value)} cannot be "
            f"one: {why}; nothing was pushed"
        )

    def _unreadable(self, owner: str, where: str, wire: Any, why: str) -> KiqError:
        return ArgumentError(
            f"{owner}: argument {self.name!r} ({where} of the payload) = {shown(wire)} cannot be read as "
            f"{self.shown}: {why}"
        )


_NAIVE = (
    "a naive datetime (no tzinfo) names no instant: the worker may run in another time zone; "
    "pass an aware one (e.g. datetime.now(timezone.utc))"
)


class ArgumentPlan:
    """Which of a job class's parameters convert, by position and by name; made by ``plan_for``."""

    def __init__(self, owner: str, function: Callable[..., Any], parameters: list[inspect.Parameter]) -> None:
        self.owner = owner
        self._function = function
        self._parameters = parameters
        self._resolved = False
        self.positional: list[tuple[int, Converter]] = []  # (index in args, converter)
        self.rest: Converter | None = None  # *args
        self.named: dict[str, Converter | None] = {}  # by keyword, None for a parameter that does not convert
        self.keywords: Converter | None = None  # **kwargs
        self.first_rest = 0  # the first index of args that *args takes

    def resolve(self) -> bool:
        """Read the annotations (once; a forward reference that does not resolve yet is tried again at the first
        push or run). True when some parameter converts."""
        if not self._resolved:
            hints = _hints(self._function, self._parameters, strict=False)
            if hints is None:
                return True  # not yet: a module still being imported; decided at first use
            self._build(hints)
        return bool(self.positional or self.rest or self.keywords or any(self.named.values()))

    def _build(self, hints: dict[str, Any]) -> None:
        """Fill the plan from the annotations; built aside and set at once, so two threads that both resolve a
        deferred plan (its first pushes or runs) cannot interleave."""
        positional: list[tuple[int, Converter]] = []
        named: dict[str, Converter | None] = {}
        rest = keywords = None
        index = 0
        for parameter in self._parameters:
            converter = converter_for(parameter.name, hints.get(parameter.name))
            if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
                if converter is not None:
                    positional.append((index, converter))
                if parameter.kind is parameter.POSITIONAL_OR_KEYWORD:
                    named[parameter.name] = converter
                index += 1
            elif parameter.kind is parameter.VAR_POSITIONAL:
                rest = converter
            elif parameter.kind is parameter.KEYWORD_ONLY:
                named[parameter.name] = converter
            else:
                keywords = converter
        self.positional, self.named, self.rest, self.keywords, self.first_rest = (
            positional,
            named,
            rest,
            keywords,
            index,
        )
        self._resolved = True

    def encode(self, job: dict[str, Any], skip: int = 0) -> None:
        """Replace the typed values of ``job``'s ``args`` and ``kwargs`` by their JSON forms (at push); the first
        ``skip`` of ``args`` are left as they are (stand-ins for values given later, see ``Client.encode``)."""
        self._convert(job, encode=True, skip=skip)

    def decode(self, args: list[Any], kwargs: dict[str, Any] | None) -> tuple[list[Any], dict[str, Any] | None]:
        """The arguments ``perform`` gets for a payload's ``args`` and ``kwargs`` (in the worker)."""
        job: dict[str, Any] = {"args": args, "kwargs": kwargs}
        self._convert(job, encode=False)
        return job["args"], job["kwargs"]

    def _convert(self, job: dict[str, Any], encode: bool, skip: int = 0) -> None:
        if not self._resolved:
            self._build(_hints(self._function, self._parameters, strict=True) or {})
        owner = self.owner
        args = job["args"]
        converted: list[Any] | None = None
        rest = self.rest
        typed = self.positional
        if rest is not None and len(args) > self.first_rest:
            typed = [*typed, *((index, rest) for index in range(self.first_rest, len(args)))]
        for index, converter in typed:
            if skip <= index < len(args):
                old = args[index]
                new = _apply(converter, old, owner, f"args[{index}]", encode)
                if type(new) is not type(old) or new != old:  # a list already in its JSON form stays that list
                    if converted is None:
                        converted = list(args)
                    converted[index] = new
        if converted is not None:  # the caller's list is left as it was
            job["args"] = converted
        kwargs = job.get("kwargs")
        if kwargs:
            named, keywords = self.named, self.keywords
            job["kwargs"] = {
                key: value if converter is None else _apply(converter, value, owner, f"kwargs[{key!r}]", encode)
                for key, value in kwargs.items()
                for converter in (named.get(key, keywords),)
            }


def _apply(converter: Converter, value: Any, owner: str, where: str, encode: bool) -> Any:
    return converter.encode(value, owner, where) if encode else converter.decode(value, owner, where)


def perform_parameters(function: Callable[..., Any], method: bool) -> list[inspect.Parameter] | None:
    """The parameters a push fills in ``function`` (less its ``self`` when it is a ``method``); None when Python
    cannot tell (a builtin)."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None
    if method and parameters and parameters[0].kind is not inspect.Parameter.VAR_POSITIONAL:
        parameters = parameters[1:]
    return parameters


def plan_for(function: Callable[..., Any], method: bool, owner: str) -> ArgumentPlan | None:
    """The plan of a job's ``perform`` (less its ``self`` when it is a ``method``), or None when no parameter
    converts: then its arguments are passed as they are, with no cost."""
    parameters = perform_parameters(function, method)
    if parameters is None:
        return None
    if all(parameter.annotation is parameter.empty for parameter in parameters):
        return None  # the usual job: nothing to read
    plan = ArgumentPlan(owner, function, parameters)
    return plan if plan.resolve() else None


def call_perform(instance: Any, args: list[Any]) -> Any:
    """``instance.perform`` called with a payload's ``args`` and ``kwargs``, converted by its class's plan: what a
    worker and the testing modes run. Returns what ``perform`` returns (a coroutine for an async job)."""
    job = instance.job
    plan = plan_of(type(instance)).arguments
    if plan is None and "kwargs" not in job:  # the usual job
        return instance.perform(*args)
    kwargs = job.get("kwargs")
    if kwargs is not None and (type(kwargs) is not dict or not all(type(key) is str for key in kwargs)):
        raise ArgumentError(
            f"{type(instance).__qualname__}: the payload's 'kwargs' must be a JSON object of keyword arguments by "
            f"name, got {shown(kwargs)}"
        )
    if plan is not None:
        args, kwargs = plan.decode(args, kwargs)
    return instance.perform(*args, **kwargs) if kwargs else instance.perform(*args)


# -- reading annotations --------------------------------------------------------------------------------
def _hints(function: Callable[..., Any], parameters: list[inspect.Parameter], strict: bool) -> dict[str, Any] | None:
    """The parameters' annotations as types. A string one that does not resolve (a forward reference): None to
    try later unless ``strict``; then that parameter is left unconverted, as an unannotated one is."""
    try:
        return typing.get_type_hints(function, include_extras=True)
    except Exception:  # any error of evaluating an annotation: per parameter below
        if not strict:
            return None
    hints: dict[str, Any] = {}
    namespace = getattr(function, "__globals__", {})
    for parameter in parameters:
        holder = types.SimpleNamespace(__annotations__={parameter.name: parameter.annotation})
        try:
            hints.update(typing.get_type_hints(holder, globalns=namespace, include_extras=True))
        except Exception:  # this parameter is not converted
            continue
    return hints


def converter_for(name: str, annotation: Any, kind: type[Converter] = Converter) -> Converter | None:
    """A converter (of ``kind``) for a value whose annotation holds a type JSON lacks, else None."""
    if annotation is None:
        return None
    found = _inspect(annotation, set())
    if found is None or not found[0]:
        return None
    return kind(name, annotation, with_datetime=found[1])


def _inspect(annotation: Any, seen: set[int]) -> tuple[bool, bool] | None:
    """``(converts, holds a datetime)`` for an annotation, or None when kiq cannot convert it (an arbitrary
    class): such a parameter is left to the strict JSON check, as an unannotated one is."""
    if annotation in _NATIVE:
        return False, False
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return True, False
        if _is_scalar(annotation):
            return True, issubclass(annotation, datetime.datetime)
        if id(annotation) in seen:  # a recursive dataclass
            return True, False
        if dataclasses.is_dataclass(annotation) or typing.is_typeddict(annotation):
            seen.add(id(annotation))
            try:
                fields = typing.get_type_hints(annotation, include_extras=True)
            except Exception:  # an annotation that does not resolve: not converted
                return None
            found = [_inspect(field, seen) for field in fields.values()]
            if any(item is None for item in found):
                return None
            return True, any(item[1] for item in found if item is not None)
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _inspect(typing.get_args(annotation)[0], seen)
    if origin is typing.Literal:
        return False, False
    if origin in _UNIONS or origin in (list, dict, tuple, set, frozenset):
        found = [_inspect(arg, seen) for arg in typing.get_args(annotation) if arg is not Ellipsis]
        if any(item is None for item in found):
            return None
        converts = origin in (tuple, set, frozenset) or any(item[0] for item in found if item is not None)
        return converts, any(item[1] for item in found if item is not None)
    return None


def _is_scalar(annotation: type) -> bool:
    return issubclass(annotation, _SCALARS) or issubclass(annotation, enum.Enum)


def _is_naive(value: Any) -> bool:
    return value.tzinfo is None or value.utcoffset() is None


def _naive_in(value: Any, path: str) -> str | None:
    """Where a naive datetime sits in ``value`` ("" for the value itself), or None."""
    if isinstance(value, datetime.datetime):
        return path if _is_naive(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items: Any = ((f".{field.name}", getattr(value, field.name)) for field in dataclasses.fields(value))
    elif isinstance(value, dict):
        items = ((f"[{key!r}]", item) for key, item in value.items())
    elif isinstance(value, list | tuple | set | frozenset):
        items = ((f"[{index}]", item) for index, item in enumerate(value))
    else:
        return None
    for step, item in items:
        found = _naive_in(item, path + step)
        if found is not None:
            return found
    return None


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "").replace("datetime.", "").replace("uuid.", "").replace("decimal.", "")


def shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."
