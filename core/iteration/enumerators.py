"""Enumerators for ``IterableJob.build_enumerator``: each yields ``(item, cursor)`` pairs with a JSON cursor.

The cursor rule is Sidekiq's (lib/sidekiq/job/iterable/enumerators.rb): the cursor yielded with an item is where
that item starts, and an enumerator given that cursor back starts *at* that item (inclusive). The job keeps the
cursor of the item it is about to process, so an item interrupted before it ran is yielded again on resume, and an
item run after the last flush may be run twice (never skipped).

- ``items(seq, cursor)``: a list, tuple or range; the cursor is the index.
- ``csv_rows(path, cursor)``: the rows of a CSV file; the cursor is the byte offset where the row starts.
- ``redis_scan(client, match, cursor)``: the keys of a Redis database, with SCAN's own cursor.
- ``sql_rows`` / ``sql_batches`` (``kiq.iteration.sql``, SQLAlchemy loaded on first use): keyset pagination.

A cursor that is not of the kind the enumerator makes (e.g. one from another enumerator after the job's
``build_enumerator`` changed) is refused with a ``kiq.iteration.CursorError`` naming the value and the fix.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import KiqError

if TYPE_CHECKING:
    import redis

T = TypeVar("T")


class CursorError(KiqError, ValueError):
    """A cursor an enumerator cannot resume from: written by another enumerator, or the data moved under it."""


def refuse_cursor(enumerator: str, cursor: object, expected: str) -> CursorError:
    """The error for a cursor ``enumerator`` did not make; the fix is in the message."""
    return CursorError(
        f"{enumerator}: cannot resume from cursor {cursor!r:.200}: expected {expected}. The job's state holds a "
        "cursor from another enumerator (build_enumerator changed while the job was running?); cancel the job "
        "(kiq cancel JID) or start it over with cursor=None"
    )


def _natural(cursor: object) -> bool:
    return type(cursor) is int and cursor >= 0


def items(seq: Sequence[T], cursor: int | None = None) -> Iterator[tuple[T, int]]:
    """The items of ``seq`` (a list, tuple, range or other sequence) with their index as the cursor; resumes at
    index ``cursor``. The sequence must be the same on every run (build it from the job's arguments)."""
    if cursor is None:
        cursor = 0
    elif not _natural(cursor):
        raise refuse_cursor("items", cursor, "an index (an integer >= 0)")
    elif cursor > len(seq):
        raise refuse_cursor("items", cursor, f"an index of the {len(seq)} items (did the sequence shrink?)")
    return ((seq[index], index) for index in range(cursor, len(seq)))


def csv_rows(
    path: str | os.PathLike[str],
    cursor: int | None = None,
    *,
    header: bool = False,
    encoding: str = "utf-8",
    **fmtparams: Any,
) -> Iterator[tuple[Any, int]]:
    """The rows of the CSV file at ``path`` (lists of strings; dicts keyed by the first row when ``header``), each
    with the byte offset where it starts as its cursor, so a resume seeks straight to it.

    A row whose quoted field spans lines has the offset of its first line. A last line without a newline (a file
    still being written, or cut short) is yielded as it is, with the offset of its start: a resume after it was
    completed reads it again, whole. A cursor past the end of the file, or one that does not start a line, means the
    file was replaced or shortened: refused (``CursorError``). The encoding must keep ``\\n`` a single byte (UTF-8,
    Latin-1, cp1252, ...): not UTF-16. ``fmtparams`` are ``csv.reader``'s (``delimiter=";"``, ...).
    """
    if cursor is not None and not _natural(cursor):
        raise refuse_cursor("csv_rows", cursor, "a byte offset (an integer >= 0)")
    return _csv_rows(os.fspath(path), cursor, header, encoding, fmtparams)


def _csv_rows(
    path: str, cursor: int | None, header: bool, encoding: str, fmtparams: dict[str, Any]
) -> Iterator[tuple[Any, int]]:
    with open(path, "rb") as file:
        position = [0]  # the offset after the lines csv.reader has taken so far

        def lines() -> Iterator[str]:
            for line in iter(file.readline, b""):
                position[0] += len(line)
                yield line.decode(encoding)

        names: list[str] | None = None
        if header:
            names = next(csv.reader(lines(), **fmtparams), None)
            if names is None:
                return
        start = position[0]
        if cursor is not None and cursor != start:
            _check_row_start(file, path, cursor, start)
            file.seek(cursor)
            position[0] = start = cursor
        reader = csv.reader(lines(), **fmtparams)
        for row in reader:
            yield (row if names is None else dict(zip(names, row, strict=False))), start
            start = position[0]


def _check_row_start(file: Any, path: str, cursor: int, first: int) -> None:
    """Refuse a cursor that cannot be where a row starts: before the first row (in the header), past the end of
    the file, or not after a newline."""
    size = os.fstat(file.fileno()).st_size
    if cursor < first:
        raise refuse_cursor("csv_rows", cursor, f"an offset past the header row of {path!r} (byte {first} on)")
    if cursor > size:
        raise refuse_cursor("csv_rows", cursor, f"an offset within {path!r} ({size} bytes: was it replaced?)")
    file.seek(cursor - 1)
    if file.read(1) != b"\n":
        raise refuse_cursor("csv_rows", cursor, f"the offset of a line's start in {path!r} (was it replaced?)")


def redis_scan(
    client: redis.Redis,
    match: str | None = None,
    cursor: int | None = None,
    *,
    count: int = 1000,
    type: str | None = None,
) -> Iterator[tuple[str | bytes, int]]:
    """The keys of ``client``'s database (matching ``match``, of ``type``), walked with ``SCAN``; the cursor is
    SCAN's cursor of the call that returned the key.

    SCAN's guarantee carries over: a key present for the whole walk is yielded at least once; a key added or deleted
    meanwhile may or may not be, and a key may be yielded more than once (more so while the database grows). A
    resume repeats the SCAN call the cursor names, so the keys of that call (about ``count``) may run again. One
    node only: on Redis Cluster, walk each primary with its own client.
    """
    if cursor is not None and not _natural(cursor):
        raise refuse_cursor("redis_scan", cursor, "a SCAN cursor (an integer >= 0)")
    return _scan(client, match, cursor or 0, count, type)


def _scan(
    client: redis.Redis, match: str | None, cursor: int, count: int, type_: str | None
) -> Iterator[tuple[str | bytes, int]]:
    while True:
        following, keys = client.scan(cursor, match=match, count=count, _type=type_)
        for key in keys:
            yield key, cursor
        if following == 0:
            return
        cursor = int(following)
