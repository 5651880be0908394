"""What arguments a job's ``perform`` takes, read once from its signature, and the check of a push against it.

A push with arguments ``perform`` could not take is refused (``kiq.InvalidJobError``) before anything is written;
the option ``check_args: False`` turns the check off for a job.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from .arguments import perform_parameters
from .errors import InvalidJobError


class Arity(NamedTuple):
    """What arguments a job class's ``perform`` takes; found once, when the class is defined."""

    counts: range  # how many positional ones: range(1, 3) for perform(number, mode="ok"); to sys.maxsize with *args
    signature: str  # "perform(number, mode='ok')", for the error message
    parameters: inspect.Signature  # without self: says why a push with keyword arguments does not fit
    keywords_required: bool  # a keyword-only parameter without a default: every push is checked by name
    by_name: dict[str, int]  # the parameters a keyword can give: their position, or sys.maxsize if keyword-only
    required: tuple[tuple[str, int], ...]  # the parameters without a default, and their position (same rule)
    any_keyword: bool  # perform takes **kwargs


def arity_of(function: Callable[..., Any], method: bool) -> Arity | None:
    """What arguments ``function`` takes (less its ``self`` when it is a ``method``): pushes are checked against
    it. None when Python cannot tell (a builtin): such a job is not checked."""
    parameters = perform_parameters(function, method)
    if parameters is None:
        return None
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keywords_required = any(p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in parameters)
    fewest = sum(1 for p in positional if p.default is p.empty)
    takes_any = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    shown = ", ".join(str(p.replace(annotation=p.empty)) for p in parameters)
    signature = f"{getattr(function, '__name__', 'perform')}({shown})"
    counts = range(fewest, sys.maxsize if takes_any else len(positional) + 1)
    keyword_only = sys.maxsize  # the position of a parameter only a keyword gives
    by_name = {p.name: index for index, p in enumerate(positional) if p.kind is p.POSITIONAL_OR_KEYWORD}
    by_name |= {p.name: keyword_only for p in parameters if p.kind is p.KEYWORD_ONLY}
    required = tuple(
        (p.name, positional.index(p) if p in positional else keyword_only)
        for p in parameters
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    )
    any_keyword = any(p.kind is p.VAR_KEYWORD for p in parameters)
    signature_object = inspect.Signature(parameters)
    return Arity(counts, signature, signature_object, keywords_required, by_name, required, any_keyword)


def check_arity(job: dict[str, Any], arity: Arity, where: str = "") -> None:
    """Refuse a push whose arguments ``perform`` could not take: by count, or by binding when keywords are in play."""
    kwargs = job.get("kwargs")
    count = len(job["args"])
    if kwargs is None and not arity.keywords_required:
        if count not in arity.counts:
            raise wrong_count(job, arity, count, where)
        return
    if fits(arity, count, kwargs or {}):  # the common case, cheaply: Signature.bind costs ~4 µs
        return
    try:
        arity.parameters.bind(*job["args"], **(kwargs or {}))
    except TypeError as exc:
        raise InvalidJobError(
            f"{job['class']}: {arity.signature} cannot take these arguments{where}: {exc}; nothing was pushed (the "
            "option check_args=False turns this check off)"
        ) from None


def fits(arity: Arity, count: int, kwargs: dict[str, Any]) -> bool:
    """Whether ``count`` positional arguments and ``kwargs`` bind to ``perform`` (as ``Signature.bind`` would say)."""
    if count >= arity.counts.stop:
        return False
    by_name = arity.by_name
    for key in kwargs:
        position = by_name.get(key)
        if position is None:
            if not arity.any_keyword:
                return False
        elif position < count:  # given twice
            return False
    return all(position < count or name in kwargs for name, position in arity.required)


def wrong_count(job: dict[str, Any], arity: Arity, count: int, where: str = "") -> InvalidJobError:
    """The refusal of a push of ``count`` positional arguments that ``perform`` cannot take."""
    counts = arity.counts
    if counts.stop == sys.maxsize:
        expected = f"at least {counts.start}"
    elif len(counts) == 1:
        expected = str(counts.start)
    else:
        expected = f"{counts.start} {'or' if len(counts) == 2 else 'to'} {counts.stop - 1}"
    noun = "argument" if expected == "1" or expected.endswith(" 1") else "arguments"
    return InvalidJobError(
        f"{job['class']}: {arity.signature} takes {expected} {noun}, got {count}"
        f"{where}; nothing was pushed (the option check_args=False turns this check off)"
    )
