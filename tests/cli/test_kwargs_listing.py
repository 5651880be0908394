"""Keyword arguments in the CLI's job listings (``kiq queues NAME``, ``retries``, ``scheduled``, ``dead``): a KWARGS
column when a listed job has some, the same columns as ever when none has; ``--json`` keeps them in the payload."""

from __future__ import annotations

import time

import pytest
import redis

from tests.cli.helpers import Cli, failed_json, job_json


def test_a_queue_with_kwargs_lists_them_in_their_own_column(cli: Cli, r: redis.Redis) -> None:
    r.lpush("queue:low", job_json("plain", queue="low"), job_json("keyed", queue="low", kwargs={"amount": 5}))
    r.sadd("queues", "low")
    header, keyed, plain = cli("queues", "low").splitlines()
    assert header.split() == ["JID", "CLASS", "ENQUEUED", "RETRIED", "ARGS", "KWARGS", "ERROR"]
    assert keyed.split()[0] == "keyed" and keyed.index('["keyed", 1]') < keyed.index('{"amount": 5}')
    assert header.index("KWARGS") == keyed.index('{"amount": 5}')
    assert plain.split()[0] == "plain" and "{" not in plain
    listed = cli.json("queues", "low")
    assert [(job["jid"], job.get("kwargs")) for job in listed] == [("keyed", {"amount": 5}), ("plain", None)]


@pytest.mark.parametrize(("command", "key"), [("retries", "retry"), ("dead", "dead"), ("scheduled", "schedule")])
def test_the_sets_list_kwargs_too(cli: Cli, r: redis.Redis, command: str, key: str) -> None:
    keyed = job_json("keyed", kwargs={"note": "x" * 60}, error_class="ValueError", error_message="no",
                     failed_at=time.time(), retry_count=1)  # fmt: skip
    r.zadd(key, {keyed: time.time() + 60, failed_json("plain"): time.time() + 30})
    header, *rows = cli(command).splitlines()
    assert header.split() == ["JID", "CLASS", "QUEUE", "DIED" if command == "dead" else "RUNS", "RETRIED", "ARGS",
                              "KWARGS", "ERROR"]  # fmt: skip
    (row,) = [row for row in rows if row.startswith("keyed")]
    assert '{"note": "xxxx' in row and "…" in row  # cut to the column's width, as args are
    assert [job["kwargs"] for job in cli.json(command) if job["jid"] == "keyed"] == [{"note": "x" * 60}]


def test_a_listing_without_kwargs_keeps_its_columns_and_odd_kwargs_do_not_break_it(cli: Cli, r: redis.Redis) -> None:
    r.zadd("dead", {failed_json("plain"): time.time(), job_json("odd", kwargs="amount=5"): time.time() - 1})
    header, *rows = cli("dead").splitlines()
    assert header.split() == ["JID", "CLASS", "QUEUE", "DIED", "RETRIED", "ARGS", "ERROR"]
    assert sorted(row.split()[0] for row in rows) == ["odd", "plain"]
    assert [job["kwargs"] for job in cli.json("dead") if job["jid"] == "odd"] == ["amount=5"]  # as written
