"""Keyset pagination over a SQLAlchemy select, for ``IterableJob.build_enumerator`` (needs the ``tracking`` extra's
SQLAlchemy; imported on first use of ``kiq.iteration.sql_rows``).

A page is ``WHERE key > <last key> ORDER BY key LIMIT batch``, never an OFFSET: rows inserted or deleted while the
job walks (or between its runs) move no other row, so a row present for the whole walk is yielded exactly once. A
row inserted meanwhile is yielded if its key sorts after the walk's position; a row deleted before the walk reached
it is not. The key must be unique and NOT NULL (a primary key, or a composite such as ``(Order.tenant_id,
Order.id)``), and each of its columns part of the select: a selected column, or a column of a selected entity. Its
values travel in the cursor as JSON: integers, strings and floats as they are; UUID, datetime, date and Decimal as
strings, read back by the column's type.

The cursor is the key of the row (``sql_rows``) or of the batch's first row (``sql_batches``), as a JSON value for a
one-column key and a list for a composite one; resuming from it starts at that row (Sidekiq's rule: inclusive).
"""

from __future__ import annotations

import datetime
import decimal
import operator
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import Engine, Select, inspect, tuple_
from sqlalchemy.orm import Mapper
from sqlalchemy.sql.elements import ColumnElement

from .enumerators import refuse_cursor

KeyReader = Callable[[Any], Any]
# key types a JSON cursor keeps as text: (how to write one, how to read it back)
TEXT_FORMS: dict[type, tuple[Callable[[Any], str], Callable[[str], Any]]] = {
    uuid.UUID: (str, uuid.UUID),
    datetime.datetime: (datetime.datetime.isoformat, datetime.datetime.fromisoformat),
    datetime.date: (datetime.date.isoformat, datetime.date.fromisoformat),
    decimal.Decimal: (str, decimal.Decimal),
}
JSON_SCALARS = (int, str, float)


def sql_rows(
    source: Any, statement: Select[Any], *, key: Any, batch: int = 1000, cursor: Any = None
) -> Iterator[tuple[Any, Any]]:
    """The rows of ``statement`` in key order, each with its key as the cursor: an entity for ``select(User)``, a
    value for a one-column select, a ``Row`` otherwise. ``source`` runs each page: a ``Session`` or ``Connection``
    (its transaction; end it between runs), an ``Engine`` (a connection per page) or a ``sessionmaker`` (a session
    per page: no identity map growing over a long walk). ``key`` is a column or a tuple of columns."""
    walk = Keyset("sql_rows", statement, key, batch, cursor)  # bad input is refused here, not at the first item
    return ((walk.item(row), walk.cursor_of(row)) for page in walk.pages(source) for row in page)


def sql_batches(
    source: Any, statement: Select[Any], *, key: Any, batch: int = 1000, cursor: Any = None
) -> Iterator[tuple[list[Any], Any]]:
    """``sql_rows`` a page at a time: lists of up to ``batch`` items, each with its first row's key as the
    cursor (a resume reads that page again)."""
    walk = Keyset("sql_batches", statement, key, batch, cursor)
    return (([walk.item(row) for row in page], walk.cursor_of(page[0])) for page in walk.pages(source))


class Keyset:
    """One keyset walk: the key's columns and how to read them from a row, and the pages from the cursor on."""

    def __init__(self, name: str, statement: Select[Any], key: Any, batch: int, cursor: Any) -> None:
        if type(batch) is not int or batch < 1:
            raise ValueError(f"{name}: batch must be a whole number >= 1, got {batch!r}")
        self.name = name
        self.batch = batch
        self.columns = [_column(name, part) for part in (key if isinstance(key, tuple | list) else (key,))]
        descriptions = statement.column_descriptions
        self.single = len(descriptions) == 1
        self.readers = [_reader(name, column, descriptions) for column in self.columns]
        self.types = [_python_type(column) for column in self.columns]
        self.statement = statement.order_by(None).order_by(*self.columns).limit(batch)
        self.start = None if cursor is None else self._decode(cursor)

    def pages(self, source: Any) -> Iterator[Sequence[Any]]:
        return self._pages(_runner(source))

    def _pages(self, run: Callable[[Select[Any]], Sequence[Any]]) -> Iterator[Sequence[Any]]:
        after, inclusive = self.start, True
        while True:
            query = self.statement
            if after is not None:
                position = self.columns[0] if len(self.columns) == 1 else tuple_(*self.columns)
                value = after[0] if len(self.columns) == 1 else tuple_(*after)
                query = query.where(position >= value if inclusive else position > value)
            page = run(query)
            if not page:
                return
            yield page
            if len(page) < self.batch:
                return
            after, inclusive = self._key(page[-1]), False

    def item(self, row: Any) -> Any:
        return row[0] if self.single else row

    def cursor_of(self, row: Any) -> Any:
        values = [self._encode(value, index) for index, value in enumerate(self._key(row))]
        return values[0] if len(values) == 1 else values

    def _key(self, row: Any) -> list[Any]:
        values = [read(row) for read in self.readers]
        if any(value is None for value in values):
            raise ValueError(
                f"{self.name}: a row has NULL in its key {self._named()}: keyset pagination needs a NOT NULL, unique "
                "key (use the primary key, or add it to a composite key)"
            )
        return values

    def _named(self) -> str:
        return ", ".join(str(column) for column in self.columns)

    def _encode(self, value: Any, index: int) -> Any:
        if isinstance(value, JSON_SCALARS):
            return value
        form = next((forms for kind, forms in TEXT_FORMS.items() if isinstance(value, kind)), None)
        if form is None:
            raise ValueError(
                f"{self.name}: the key {self.columns[index]} holds {type(value).__name__} values ({value!r:.80}), "
                "which a JSON cursor cannot keep: use an integer, text, UUID, date/time or Decimal key"
            )
        return form[0](value)

    def _decode(self, cursor: Any) -> list[Any]:
        parts = [cursor] if len(self.columns) == 1 else cursor
        expected = f"the key value of {self._named()}" if len(self.columns) == 1 else f"a list: {self._named()}"
        if not isinstance(parts, list) or len(parts) != len(self.columns):
            raise refuse_cursor(self.name, cursor, expected)
        decoded = []
        for value, kind in zip(parts, self.types, strict=True):
            try:
                decoded.append(_decode_value(value, kind))
            except (TypeError, ValueError, ArithmeticError):
                raise refuse_cursor(self.name, cursor, f"{expected} ({_type_names(self.types)})") from None
        return decoded


def _decode_value(value: Any, kind: type | None) -> Any:
    """A key value from a cursor, as the column's Python type; TypeError/ValueError when it cannot be one."""
    if isinstance(value, bool) or not isinstance(value, JSON_SCALARS):
        raise TypeError(value)
    if kind is None or isinstance(value, kind):
        return value
    if kind is float and type(value) is int:
        return float(value)
    form = next((forms for text_kind, forms in TEXT_FORMS.items() if issubclass(kind, text_kind)), None)
    if form is None or not isinstance(value, str):
        raise TypeError(value)
    return form[1](value)


def _type_names(types: list[type | None]) -> str:
    return ", ".join("any" if kind is None else kind.__name__ for kind in types)


def _column(name: str, key: Any) -> ColumnElement[Any]:
    column = key.__clause_element__() if hasattr(key, "__clause_element__") else key
    if not isinstance(column, ColumnElement):
        raise TypeError(f"{name}: key must be a column (User.id, table.c.id) or a tuple of columns, got {key!r:.80}")
    return column


def _python_type(column: ColumnElement[Any]) -> type | None:
    try:
        kind: type = column.type.python_type
    except NotImplementedError:
        return None
    return kind


def _reader(name: str, column: ColumnElement[Any], descriptions: list[dict[str, Any]]) -> KeyReader:
    """How to read ``column`` from a result row: the row's element that is that column, or the attribute of a
    selected entity mapped to it. A column the select does not hold is refused."""
    for index, description in enumerate(descriptions):
        expr = description["expr"]
        if isinstance(expr, type):  # an ORM entity: select(User)
            attribute = _mapped_attribute(expr, column)
            if attribute is not None:
                return _entity_reader(index, attribute)
        elif _is_column(expr) and _column(name, expr).compare(column):
            return operator.itemgetter(index)
    selected = ", ".join(str(description["name"]) for description in descriptions)
    raise ValueError(
        f"{name}: the key {column} is not in the select (it selects {selected}): add the key's column to the select, "
        "or select the entity it belongs to"
    )


def _is_column(expr: Any) -> bool:
    return hasattr(expr, "__clause_element__") or isinstance(expr, ColumnElement)


def _mapped_attribute(entity: type, column: ColumnElement[Any]) -> str | None:
    """The attribute of mapped class ``entity`` that holds ``column``, if it maps it."""
    mapper: Mapper[Any] | None = inspect(entity, raiseerr=False)
    if mapper is None:
        return None
    mapped = next((c for c in mapper.columns if c.compare(column)), None)
    return None if mapped is None else mapper.get_property_by_column(mapped).key


def _entity_reader(index: int, attribute: str) -> KeyReader:
    read = operator.attrgetter(attribute)
    return lambda row: read(row[index])


def _runner(source: Any) -> Callable[[Select[Any]], Sequence[Any]]:
    """How one page's query runs on ``source`` (see ``sql_rows``)."""
    if isinstance(source, Engine):

        def on_engine(query: Select[Any]) -> Sequence[Any]:
            with source.connect() as connection:
                return connection.execute(query).all()

        return on_engine
    if hasattr(source, "execute"):
        return lambda query: source.execute(query).all()
    if callable(source):

        def on_new_session(query: Select[Any]) -> Sequence[Any]:
            with source() as session:
                rows = session.execute(query).all()
                return list(rows)

        return on_new_session
    raise TypeError(f"sql_rows: source must be a Session, Connection, Engine or sessionmaker, got {source!r:.80}")
