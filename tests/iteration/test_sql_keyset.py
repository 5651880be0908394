"""kiq.iteration.sql_rows / sql_batches: keyset pagination over 100,000 rows on SQLite and PostgreSQL while rows are
deleted and inserted by another connection, resumed from cursors mid-walk; and the refusals of bad input."""

from __future__ import annotations

import datetime
import random
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    delete,
    insert,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from kiq.iteration import CursorError, sql_batches, sql_rows

ROWS = 100_000


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    sqlite = f"sqlite:///{tmp_path / 'walk.db'}"
    # PostgreSQL: a private schema of the test database (tests.tracking_support)
    url = sqlite if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    engine = create_engine(url)
    yield engine
    engine.dispose()


@pytest.fixture
def table(engine: Engine) -> Iterator[Table]:
    """A table of ROWS rows with even ids 2..2*ROWS (odd ids are free for inserts mid-walk)."""
    table = Table(
        f"walk_{secrets.token_hex(4)}",
        MetaData(),
        Column("id", Integer, primary_key=True, autoincrement=False),
        Column("tenant", Integer, nullable=False),
        Column("at", DateTime, nullable=False),
        Column("name", String(20)),
    )
    table.create(engine)
    epoch = datetime.datetime(2026, 1, 1)
    rows = [
        {"id": 2 * n, "tenant": n % 7, "at": epoch + datetime.timedelta(seconds=n // 3), "name": f"r{n}"}
        for n in range(1, ROWS + 1)
    ]
    with engine.begin() as connection:
        connection.execute(insert(table), rows)
    yield table
    table.drop(engine)


def test_a_walk_with_rows_deleted_and_inserted_meanwhile_skips_none_present_throughout(
    engine: Engine, table: Table
) -> None:
    """Every 10,000 items another connection deletes 300 rows and inserts 300, behind and ahead of the walk; every
    25,000 items the job "stops" and resumes from the cursor of the item it was about to process."""
    rng = random.Random(7)
    original = set(range(2, 2 * ROWS + 1, 2))
    deleted: set[int] = set()
    inserted: set[int] = set()
    seen: list[int] = []
    cursor = None
    with Session(engine) as session:
        while True:
            walk = sql_rows(session, select(table.c.id, table.c.name), key=table.c.id, batch=1000, cursor=cursor)
            stopped = False
            for row, row_cursor in walk:
                assert row_cursor == row.id and row.name is not None
                if len(seen) and len(seen) % 25_000 == 0 and cursor != row_cursor:
                    cursor, stopped = row_cursor, True  # interrupted before processing this row
                    break
                seen.append(row.id)
                if len(seen) % 10_000 == 0:
                    position = row.id
                    gone = rng.sample(sorted(original - deleted), 300)
                    fresh = {rng.randrange(1, 2 * ROWS + 2000, 2) for _ in range(300)} - inserted
                    with engine.begin() as other:
                        other.execute(delete(table).where(table.c.id.in_(gone)))
                        other.execute(
                            insert(table),
                            [{"id": i, "tenant": 0, "at": datetime.datetime(2026, 1, 1), "name": "new"} for i in fresh],
                        )
                    deleted.update(gone)
                    inserted.update(fresh)
                    assert any(i < position for i in gone) and any(i > position for i in gone)
            session.commit()  # between runs of the job: a new transaction sees the other connection's writes
            if not stopped:
                break
    assert len(seen) == len(set(seen)), "a row was yielded twice"
    missing = (original - deleted) - set(seen)
    assert not missing, f"{len(missing)} rows present throughout were skipped, e.g. {sorted(missing)[:5]}"
    assert set(seen) <= original | inserted
    assert seen == sorted(seen)


def test_batches_resume_at_the_batch_of_their_cursor_on_a_composite_key(engine: Engine, table: Table) -> None:
    """(tenant, id) ordered, ``sql_batches`` from an Engine (a connection per page); resumed from the third batch."""
    statement = select(table.c.tenant, table.c.id).where(table.c.id <= 20_000)
    key = (table.c.tenant, table.c.id)
    batches = list(sql_batches(engine, statement, key=key, batch=700))
    assert [len(rows) for rows, _ in batches] == [700] * 14 + [200]
    flat = [tuple(row) for rows, _ in batches for row in rows]
    assert flat == sorted(flat) and len(flat) == 10_000
    assert batches[2][1] == list(batches[2][0][0])  # the cursor: the first row's key, as a JSON list
    resumed = list(sql_batches(engine, statement, key=key, batch=700, cursor=batches[2][1]))
    assert [[tuple(r) for r in rows] for rows, _ in resumed] == [[tuple(r) for r in rows] for rows, _ in batches[2:]]


def test_a_datetime_key_travels_in_the_cursor_as_text(engine: Engine, table: Table) -> None:
    statement = select(table.c.at, table.c.id).where(table.c.id <= 60)
    walked = list(sql_rows(engine, statement, key=(table.c.at, table.c.id), batch=4))
    assert walked[5][1] == ["2026-01-01T00:00:02", 12]
    resumed = list(sql_rows(engine, statement, key=(table.c.at, table.c.id), batch=4, cursor=walked[5][1]))
    assert [tuple(row) for row, _ in resumed] == [tuple(row) for row, _ in walked[5:]]


class Base(DeclarativeBase):
    pass


class Customer(Base):
    __tablename__ = "customers"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str | None] = mapped_column(String(50), unique=True)


@pytest.fixture
def customers(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    engine = create_engine(f"sqlite:///{tmp_path / 'orm.db'}")
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        session.add_all(Customer(id=n, email=f"c{n}@example.com") for n in range(1, 51))
        session.add(Customer(id=51, email=None))
        session.commit()
    yield sessionmaker(engine)
    engine.dispose()


def test_an_entity_select_yields_entities_and_reads_the_key_from_them(customers: sessionmaker[Session]) -> None:
    walked = list(sql_rows(customers, select(Customer).where(Customer.id <= 50), key=Customer.id, batch=7))
    assert [(customer.id, cursor) for customer, cursor in walked] == [(n, n) for n in range(1, 51)]
    assert walked[0][0].email == "c1@example.com"  # loaded before its page's session closed
    emails = list(sql_rows(customers, select(Customer.email).where(Customer.id <= 3), key=Customer.email))
    assert emails == [(f"c{n}@example.com", f"c{n}@example.com") for n in (1, 2, 3)]


def test_bad_input_is_refused_naming_the_value_and_the_fix(customers: sessionmaker[Session]) -> None:
    with pytest.raises(CursorError) as raised:  # a cursor another enumerator wrote (items' index as text, say)
        list(sql_rows(customers, select(Customer), key=Customer.id, cursor="12"))
    assert "cursor '12'" in str(raised.value) and "customers.id" in str(raised.value) and "int" in str(raised.value)
    assert "cursor=None" in str(raised.value)
    with pytest.raises(CursorError, match=r"cursor 12: expected a list: customers.email, customers.id"):
        sql_rows(customers, select(Customer), key=(Customer.email, Customer.id), cursor=12)
    with pytest.raises(CursorError, match=r"cursor True"):
        sql_rows(customers, select(Customer), key=Customer.id, cursor=True)
    with pytest.raises(ValueError, match=r"the key customers.id is not in the select \(it selects email\)"):
        sql_rows(customers, select(Customer.email), key=Customer.id)
    with pytest.raises(TypeError, match=r"key must be a column .* got 'id'"):
        sql_rows(customers, select(Customer), key="id")
    with pytest.raises(ValueError, match=r"batch must be a whole number >= 1, got 0"):
        sql_rows(customers, select(Customer), key=Customer.id, batch=0)
    with pytest.raises(ValueError, match=r"NULL in its key customers.email: .*NOT NULL, unique"):
        list(sql_rows(customers, select(Customer).where(Customer.id > 45), key=Customer.email))
