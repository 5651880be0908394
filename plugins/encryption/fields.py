"""Which values of a job are encrypted (its ``encrypt`` option), and sealing, opening and hiding them.

``encrypt: True`` is Sidekiq Enterprise's rule: the last positional argument. ``encrypt: ["ssn", "card"]`` names
keyword arguments; one of them passed by position would travel in clear, so such a push is refused. Each value
is sealed on its own (kiq.plugins.encryption.keys), bound to the job's class and the field, from its JSON text.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Literal

import kiq
import kiq.ext

from .keys import DecryptionError, KeyRing, is_sealed

ENCRYPTED = "[encrypted]"  # what kiq shows in place of an encrypted value (never the ciphertext, never the value)
LAST = "args[-1]"
# the encrypted fields: the last positional argument (True), or keyword arguments by name
Selection = Literal[True] | tuple[str, ...]
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_POSITIONS: dict[type[Any], dict[str, int]] = {}  # by job class: a process defines few


def selection_of(option: object) -> Selection | None:
    """What a payload's ``encrypt`` option encrypts; None for nothing (absent, false). ValueError for a value that
    is neither true nor a list of keyword argument names."""
    if option is None or option is False:
        return None
    if option is True:
        return True
    if isinstance(option, list) and option and all(isinstance(name, str) and name for name in option):
        return tuple(option)
    raise ValueError(
        f"the encrypt option must be true (the last positional argument) or a list of keyword argument names, "
        f'e.g. ["ssn"]; got {json.dumps(option, default=repr)[:80]}'
    )


def field_name(name: str) -> str:
    return f"kwargs[{name!r}]"


def associated(job_class: object, field: str) -> bytes:
    """What a sealed value is bound to: its job's wire class name and its field."""
    return f"{job_class}\n{field}".encode("utf-8", "surrogatepass")


def seal_job(job: dict[str, Any], ring: KeyRing, job_class: type[Any] | str) -> None:
    """Replace the values ``job``'s ``encrypt`` option selects by their sealed form (a push); a value already
    sealed (a due scheduled job or a retry pushed again) is left as it is."""
    try:
        selection = selection_of(job.get("encrypt"))
    except ValueError as exc:
        raise kiq.InvalidJobError(f"{job['class']}: {exc}") from None
    if selection is None:
        return
    name = job["class"]
    if selection is True:
        args = job["args"]
        if not args:
            raise kiq.InvalidJobError(
                f"{name}: encrypt: True encrypts the last positional argument, and the job has none: pass the value "
                'by position, or name the keyword arguments to encrypt (encrypt: ["ssn"])'
            )
        if not is_sealed(args[-1]):
            kiq.ext.check_job(job)  # the push checks only the sealed text: the value is checked here, in clear
            job["args"] = [*args[:-1], ring.seal(_plaintext(args[-1], name, LAST), associated(name, LAST))]
        return
    kwargs = job.get("kwargs")
    if isinstance(job_class, type) and job["args"]:
        _refuse_by_position(name, job_class, selection, len(job["args"]))
    if not isinstance(kwargs, dict) or not any(key in kwargs and not is_sealed(kwargs[key]) for key in selection):
        return
    kiq.ext.check_job(job)
    job["kwargs"] = {
        key: ring.seal(_plaintext(value, name, field_name(key)), associated(name, field_name(key)))
        if key in selection and not is_sealed(value)
        else value
        for key, value in kwargs.items()
    }


def open_job(job: dict[str, Any], ring: KeyRing) -> tuple[list[Any], dict[str, Any] | None] | None:
    """The arguments ``perform`` gets for a payload whose ``encrypt`` option selects some: ``(args, kwargs)``
    (``kwargs`` None when unchanged), or None when it selects nothing. DecryptionError when a value cannot be
    opened: the error names the field and the key version, never the value."""
    try:
        selection = selection_of(job.get("encrypt"))
    except ValueError as exc:
        raise DecryptionError(f"the job cannot run: {exc}") from None
    if selection is None:
        return None
    name = job.get("class")
    args = job["args"]
    if selection is True:
        if not args:
            raise DecryptionError("encrypt: true, but the job has no positional argument to decrypt")
        return [*args[:-1], _value(ring.open(args[-1], associated(name, LAST), LAST), LAST)], None
    kwargs = job.get("kwargs")
    if not isinstance(kwargs, dict) or not any(key in kwargs for key in selection):
        return args, None
    opened = dict(kwargs)
    for key in selection:
        if key in kwargs:
            field = field_name(key)
            opened[key] = _value(ring.open(kwargs[key], associated(name, field), field), field)
    return args, opened


def redact(job: dict[str, Any]) -> None:
    """Show ``[encrypted]`` for each value the ``encrypt`` option selects (``job`` is a copy made for showing). An
    option of another form (another producer's) hides the last positional argument, as Sidekiq's Web UI does."""
    try:
        selection = selection_of(job.get("encrypt"))
    except ValueError:
        selection = True
    if selection is None:
        return
    if selection is True:
        args = job.get("args")
        if isinstance(args, list) and args:
            job["args"] = [*args[:-1], ENCRYPTED]
        return
    kwargs = job.get("kwargs")
    if isinstance(kwargs, dict):
        job["kwargs"] = {key: ENCRYPTED if key in selection else value for key, value in kwargs.items()}


def _plaintext(value: Any, job_name: str, field: str) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise kiq.JobArgumentError(
            f"{job_name}: the encrypted {field} holds a lone surrogate (text that was not UTF-8), which a payload "
            "cannot carry; decode the bytes it came from with the right encoding"
        ) from None


def _value(plaintext: bytes, field: str) -> Any:
    try:
        return json.loads(plaintext.decode("utf-8"))
    except (ValueError, RecursionError):
        raise DecryptionError(
            f"{field} decrypted, but is not the JSON text of a value (its value is not shown)"
        ) from None


def _refuse_by_position(name: str, job_class: type[Any], selection: tuple[str, ...], count: int) -> None:
    """A named field given by position would be pushed in clear: refuse the push."""
    positions = _positions(job_class)
    for key in selection:
        index = positions.get(key)
        if index is not None and index < count:
            raise kiq.InvalidJobError(
                f"{name}: {key!r} is to be encrypted (encrypt: {list(selection)}) but is passed by position "
                f"(args[{index}]), where it would travel in clear: pass it by keyword ({key}=...)"
            )


def _positions(job_class: type[Any]) -> dict[str, int]:
    """The positional parameters of a job class's ``perform`` (or ``@kiq.job`` function), by name; read once."""
    positions = _POSITIONS.get(job_class)
    if positions is None:
        positions = _POSITIONS[job_class] = _read_positions(job_class)
    return positions


def _read_positions(job_class: type[Any]) -> dict[str, int]:
    function = getattr(job_class, "function", None)
    target, skip = (function, 0) if callable(function) else (getattr(job_class, "perform", None), 1)
    try:
        parameters = list(inspect.signature(target).parameters.values())[skip:]  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return {}
    return {parameter.name: index for index, parameter in enumerate(p for p in parameters if p.kind in _POSITIONAL)}
