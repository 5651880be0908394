"""What a database cannot store, replaced before a write: PostgreSQL refuses NUL in text and jsonb, no driver can
encode a lone surrogate (e.g. "\\ud800") as UTF-8, and NaN or infinity is not JSON. Such a value must not cost other
jobs their statuses: strings get U+FFFD in their place, floats become None.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from .models import JOB_CLASS_LENGTH
from .writer import Update

REPLACEMENT = "\ufffd"
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# json.dumps writes NUL as the escape \u0000: a backslash that is not itself escaped (it follows an even number
# of backslashes), then u0000
ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def make_storable(updates: Sequence[Update]) -> None:
    """Replace in each update, in place, what the database cannot store (see the module doc); job classes are
    cut to the column's length. The nested values are copied, not changed: params are the job's own args."""
    for u in updates:
        u.job_id, u.task_id, u.status = storable(u.job_id), storable(u.task_id), storable(u.status)
        u.job_class = storable(u.job_class)[:JOB_CLASS_LENGTH]
        u.params, u.last_error, u.messages = storable(u.params), storable(u.last_error), storable(u.messages)
        u.result = storable(u.result)


def storable(value: Any) -> Any:
    """``value`` with what the database cannot store replaced, in strings and floats, and inside dicts and lists."""
    if isinstance(value, str):
        return UNSTORABLE.sub(REPLACEMENT, value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value
