"""Iterable jobs' enumerators (``kiq.iteration``): ``items``, ``csv_rows``, ``redis_scan``, and, with SQLAlchemy
installed, ``sql_rows`` and ``sql_batches`` (loaded on first use, so the core does not need SQLAlchemy)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .enumerators import CursorError, csv_rows, items, redis_scan

if TYPE_CHECKING:
    from .sql import sql_batches, sql_rows

__all__ = ["CursorError", "csv_rows", "items", "redis_scan", "sql_batches", "sql_rows"]


def __getattr__(name: str) -> Any:
    if name in ("sql_rows", "sql_batches"):
        from . import sql

        return getattr(sql, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
