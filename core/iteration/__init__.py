"""Iterable jobs: long jobs that resume where they stopped and can be cancelled (Sidekiq 7.3's IterableJob).

``kiq.IterableJob`` (kiq.iteration.job) runs them; their state lives in ``it-<jid>`` (kiq.iteration.state);
``kiq.cancel(jid)`` cancels one. See docs/guide/iteration.md.

The enumerators a ``build_enumerator`` returns (kiq.iteration.enumerators): ``items``, ``csv_rows``, ``redis_scan``,
and, with SQLAlchemy installed, ``sql_rows`` and ``sql_batches`` (kiq.iteration.sql, loaded on first use, so the
core does not need SQLAlchemy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .cancellation import cancel
from .enumerators import CursorError, csv_rows, items, redis_scan
from .job import IterableJob
from .state import IterationState

if TYPE_CHECKING:
    from .sql import sql_batches, sql_rows

__all__ = [
    "CursorError",
    "IterableJob",
    "IterationState",
    "cancel",
    "csv_rows",
    "items",
    "redis_scan",
    "sql_batches",
    "sql_rows",
]


def __getattr__(name: str) -> Any:
    if name in ("sql_rows", "sql_batches"):
        from . import sql

        return getattr(sql, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
