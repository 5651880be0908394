"""A job's result record: the JSON kept in Redis (and in its tracking event) for a job whose return value is wanted.

``{"value": <what perform returned>}`` (with ``"class": <its job's wire name>`` and the value in its JSON form
when ``perform``'s return annotation types it: kiq.ext.result_form), or ``{"error": "<why there is none>"}``: the
value was not strict JSON, the job died, or it was dropped unrun. Strict JSON is kiq's rule for unannotated
arguments, applied to results: the value (its JSON form) must come back from JSON equal to what was returned (a
tuple would come back as a list, a set or a datetime not at all, NaN as null), checked by a round trip through
kiq's own encoder.
"""

from __future__ import annotations

import math
from typing import Any

import kiq
import kiq.ext

PREFIX = "kiq:result:"


def result_key(redis: Any, jid: str) -> str:
    """The key of ``jid``'s record on ``redis`` (a sync or asyncio client): in kiq's shared slot on a cluster."""
    return kiq.ext.keyspace(redis).key(PREFIX + jid)


def value_record(job: dict[str, Any], value: Any) -> tuple[str, str | None]:
    """The record of ``value``, returned by ``job``: ``(its JSON, None)``; or, when the value is not strict JSON,
    an error record and the error's message. A job class whose ``perform`` has a return annotation stores the
    value's JSON form by it (``kiq.ext.result_form``: a ``Decimal`` as its string, ...), read back by
    ``result_value``; such a record names the class, so a reader knows which annotation reads it."""
    name = job.get("class")
    job_class = kiq.registry.find(name) if isinstance(name, str) else None
    try:
        form = value if job_class is None else kiq.ext.result_form(job_class, value)
    except Exception as exc:  # ResultTypeError, or a converter failing on a value too deep: named, bounded
        message = f"{kiq.ext.error_message(exc, 1000)} (job {job.get('jid')}); no result was stored"
        return error_record(message), message
    try:
        # a converted value names its class (result_form returns anything else as it was), for its reader
        text = kiq.ext.dumps({"value": form} if form is value else {"value": form, "class": name})
        same = kiq.ext.loads(text)["value"] == form
    except Exception as exc:  # a 5,000-deep value too (RecursionError): named, never the job's error
        problem = f"{type(exc).__name__}: {kiq.ext.error_message(exc, 200)}"
    else:
        if same:
            return text, None
        problem = "it would not come back equal from JSON (a tuple, a non-string key, NaN or infinity?)"
    message = (
        f"{name} {job.get('jid')} returned {type(value).__name__} {kiq.ext.describe(value)}, which is not strict JSON "
        f"({problem}); no result was stored: annotate perform's return type (e.g. -> Decimal) to keep a Decimal, "
        "datetime, UUID, dataclass..."
    )
    return error_record(message), message


def read_value(record: dict[str, Any]) -> Any:
    """The value of a record as its job's return annotation reads it, when the record names a class registered
    here (else its JSON form). Raises ``kiq.ext.ResultTypeError`` when it cannot be read as that type."""
    name = record.get("class")
    job_class = kiq.registry.find(name) if isinstance(name, str) else None
    value = record["value"]
    return value if job_class is None else kiq.ext.result_value(job_class, value)


def error_record(message: str) -> str:
    return kiq.ext.dumps({"error": message})


def result_ttl(job: dict[str, Any], default: float) -> float:
    """Seconds to keep ``job``'s result: its ``result_ttl`` option (0 or False: none), else ``default`` (the
    ``job_result_ttl`` setting). A value another producer wrote wrong counts as absent."""
    seconds = _seconds(job.get("result_ttl"))
    return default if seconds is None else seconds


def check_result_ttl(job: dict[str, Any]) -> None:
    """Refuse a wrong ``result_ttl`` at the push (``kiq.InvalidJobError``), rather than store no result later."""
    ttl = job.get("result_ttl")
    if _seconds(ttl) is None:
        raise kiq.InvalidJobError(
            f"{job.get('class')}: option 'result_ttl' must be a number of seconds >= 0, or False, got {ttl!r:.80}"
        )


def _seconds(ttl: object) -> float | None:
    """A ``result_ttl`` as seconds (False: 0); None when it is not one (absent, or wrong)."""
    if ttl is False:
        return 0.0
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and 0 <= ttl < math.inf:
        return float(ttl)
    return None
