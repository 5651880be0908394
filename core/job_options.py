"""Job options (``kiq_options``, ``Job.set(...)``, the ``default_job_options`` setting): their checks where they
are written, and the near misses of an option name refused at push."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable
from typing import Any

from .config import config_or_default
from .errors import ConfigError
from .payload import check_options
from .settings import did_you_mean

# the fields of a Sidekiq 7 payload: never taken for a misspelt option (``args`` is a near miss of ``tags``)
PAYLOAD_FIELDS = frozenset(
    {"class", "args", "jid", "queue", "retry", "created_at", "enqueued_at", "at", "retry_queue", "retry_for",
     "backtrace", "dead", "tags", "error_message", "error_class", "failed_at", "retried_at", "retry_count",
     "error_backtrace", "wrapped", "bid", "kwargs"}
)  # fmt: skip


def _is_seconds(value: Any) -> bool:
    return (type(value) is int and 0 < value < 2**53) or (type(value) is float and math.isfinite(value) and value > 0)


# Sidekiq's options and their types, and kiq's check_args and timeout; other options pass through to the payload for
# middleware to read, unless they are a near miss of one of these (or of a plugin's, checked at push)
_OPTION_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "queue": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "retry": (lambda v: isinstance(v, bool) or (isinstance(v, int) and v >= 0), "true, false or a count"),
    "retry_queue": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "retry_for": (lambda v: _is_seconds(v), "seconds > 0"),
    "backtrace": (lambda v: isinstance(v, bool) or (isinstance(v, int) and v > 0), "true, false or a count"),
    "dead": (lambda v: isinstance(v, bool), "true or false"),
    "tags": (lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v), "a list of strings"),
    "check_args": (lambda v: isinstance(v, bool), "true or false"),
    "timeout": (lambda v: v is None or _is_seconds(v), "seconds > 0 (a time limit), or None"),
}


def check_job_options(options: dict[str, Any], owner: str) -> None:
    """Refuse options of a type Sidekiq would refuse (ConfigError), then any value that is not native JSON
    (JobArgumentError): options travel in every payload, and the mistake should show where they are written.

    A plugin's option (not one of Sidekiq's) may be a callable instead: the plugin that declares it computes the
    value at each push from the job's arguments, in its client middleware (e.g. the groups plugin's ``group``)."""
    if not options:  # every perform_async comes here with none
        return
    computed = False
    for key, value in options.items():
        check = _OPTION_CHECKS.get(key)
        if check is None:
            refuse_near_misses((key,), _OPTION_CHECKS, owner)
            computed = computed or callable(value)
        elif not check[0](value):
            raise ConfigError(f"{owner}: option {key!r} must be {check[1]}, got {value!r:.80}")
    if computed:
        options = {key: value for key, value in options.items() if key in _OPTION_CHECKS or not callable(value)}
    check_options(options, owner)


_checked_defaults: list[dict[str, Any]] = [{}]  # the default_job_options value last checked


def default_job_options() -> dict[str, Any]:
    """The default config's ``default_job_options``, checked as kiq_options are when a push first uses a value."""
    defaults: dict[str, Any] = config_or_default(None).get("default_job_options")
    if defaults and defaults is not _checked_defaults[0]:
        check_job_options(defaults, "the default_job_options setting")
        _checked_defaults[0] = defaults
    return defaults


def refuse_near_misses(names: Iterable[Any], options: Collection[str], owner: str) -> None:
    """Sidekiq lets any option travel in the payload for middleware to read, so an unknown option is no error; but
    one that is a near miss of ``options`` is a typo that would be ignored silently (``queu`` pushes to ``default``)."""
    for name in names:
        if isinstance(name, str) and name not in options and name not in PAYLOAD_FIELDS:
            hint = did_you_mean(name, options)
            if hint:
                raise ConfigError(f"{owner}: unknown job option {name!r}{hint}")


# per set of options declared by plugins, the names a push of a job class found not to be a near miss of one: a
# push compares its keys with this set, so difflib runs once per new name, not on every push
accepted_options: dict[frozenset[str], set[str]] = {}


def refuse_near_misses_of_declared(job: dict[str, Any], declared: frozenset[str]) -> None:
    """Check the names of a job not seen before (options of its class or its ``.set()``) against the options its
    config's plugins declared, which are not known where the class is defined."""
    refuse_near_misses(job, declared, str(job["class"]))
    accepted_options.setdefault(declared, set(declared | PAYLOAD_FIELDS)).update(job)
