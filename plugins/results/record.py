"""A job's result record: the JSON kept in Redis (and in its tracking event) for a job whose return value is wanted.

``{"value": <what perform returned>}``, or ``{"error": "<why there is none>"}``: the value was not strict JSON, the job
died, or it was dropped unrun. Strict JSON is kiq's rule for arguments, applied to results: the value must come back
from JSON equal to what was returned (a tuple would come back as a list, a set or a datetime not at all, NaN as
null), checked by a round trip through kiq's own encoder.
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
    an error record and the error's message."""
    try:
        text = kiq.ext.dumps({"value": value})
        same = kiq.ext.loads(text)["value"] == value
    except Exception as exc:  # a 5,000-deep value too (RecursionError): named, never the job's error
        problem = f"{type(exc).__name__}: {kiq.ext.error_message(exc, 200)}"
    else:
        if same:
            return text, None
        problem = "it would not come back equal from JSON (a tuple, a non-string key, NaN or infinity?)"
    message = (
        f"{job.get('class')} {job.get('jid')} returned {type(value).__name__} {kiq.ext.describe(value)}, which is "
        f"not strict JSON ({problem}); no result was stored"
    )
    return error_record(message), message


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
