"""The benchmark's own schema in the tracking database (the run's URL sets ``search_path`` to it).

``python -m bench.systems.tracking_db reset URL SCHEMA``: drop and recreate it, so a run starts empty and
never touches tables it did not create.
``python -m bench.systems.tracking_db wait URL SCHEMA COUNT TIMEOUT``: connect, wait for a line on stdin (the
harness sends it when the queue is empty, so start-up is not timed), poll until COUNT jobs are ``finished``;
print ``{"at": <epoch seconds>, "finished": n}``, so the harness can time the database writes too.
"""

from __future__ import annotations

import json
import re
import sys
import time

import sqlalchemy

EVENTS = "kiq_tracking_events"


def _schema(name: str) -> str:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise ValueError(f"schema name {name!r} must be a plain lower-case identifier")
    return name


def reset(url: str, schema: str) -> None:
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text(f"DROP SCHEMA IF EXISTS {_schema(schema)} CASCADE"))
        connection.execute(sqlalchemy.text(f"CREATE SCHEMA {schema}"))
    engine.dispose()


def wait(url: str, schema: str, count: int, timeout: float) -> dict[str, float]:
    engine = sqlalchemy.create_engine(url)
    query = sqlalchemy.text(f"SELECT count(*) FROM {_schema(schema)}.{EVENTS} WHERE status = 'finished'")
    deadline = time.monotonic() + timeout
    with engine.connect() as connection:
        connection.execute(query)
        connection.commit()
        sys.stdin.readline()
        while True:
            finished = int(connection.execute(query).scalar_one())
            connection.commit()  # a fresh snapshot per poll
            if finished >= count or time.monotonic() > deadline:
                break
            time.sleep(0.02)
    engine.dispose()
    return {"at": time.time(), "finished": finished}


if __name__ == "__main__":
    command, url, schema, *rest = sys.argv[1:]
    if command == "reset":
        reset(url, schema)
    else:
        print(json.dumps(wait(url, schema, int(rest[0]), float(rest[1]))))
