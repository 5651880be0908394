"""``kiq busy`` (running jobs, iterable ones with their cursor, executions and runtime, read in one pipeline) and
``kiq cancel JID`` (Sidekiq's cancelled mark, once)."""

from __future__ import annotations

import json
import re
import time

import pytest
import redis

import kiq
from kiq.iteration import state
from tests.cli.helpers import Cli
from tests.contrib.web.http_support import add_process

ITERABLE, PLAIN = "a" * 24, "b" * 24


def running(r: redis.Redis) -> None:
    add_process(
        r,
        "host:1:abc",
        work={
            "1": {"class": "Export", "args": [7], "jid": ITERABLE, "queue": "default"},
            "2": {"class": "Mailer", "args": ["x"], "jid": PLAIN, "queue": "mail"},
        },
    )
    state.flush(r, ITERABLE, 3, {"id": 41_000, "file": "é.csv"}, 125.5)


def test_busy_shows_iterable_jobs_cursor_executions_and_runtime(cli: Cli, r: redis.Redis) -> None:
    running(r)
    lines = cli("busy").splitlines()
    assert lines[0].split() == ["JID", "CLASS", "QUEUE", "PROCESS", "STARTED", "ARGS", "RUN", "CURSOR", "RUNTIME"]
    iterable = next(line for line in lines if line.startswith(ITERABLE))
    cells = re.split(r"\s{2,}", iterable.strip())
    assert cells[1] == "Export" and cells[-3:] == ["3", '{"id": 41000, "file": "é.csv"}', "2m"]
    plain = next(line for line in lines if line.startswith(PLAIN))
    assert plain.rstrip().endswith('["x"]')  # no iteration columns for a plain job
    data = {job["payload"]["jid"]: job for job in cli.json("busy")}
    iteration = data[ITERABLE]["iteration"]
    assert (iteration["executions"], iteration["cursor"], iteration["cancelled_at"]) == (
        3,
        {"id": 41000, "file": "é.csv"},
        None,
    )
    assert 125.5 <= iteration["runtime"] < 125.5 + 30  # the finished runs' 125.5 s and this run's so far
    assert data[PLAIN]["iteration"] is None and data[PLAIN]["process"] == "host:1:abc"


@pytest.mark.own_redis  # counts commands in the server-wide stats: no other test's on it
def test_busy_reads_each_state_once(cli: Cli, r: redis.Redis, config: kiq.Config) -> None:
    running(r)
    for n in range(30):
        jid = f"{n:024x}"
        add_process(r, f"host:{n + 2}:abc", work={"1": {"class": "Export", "args": [], "jid": jid}})
        state.flush(r, jid, 1, n, 0)
    before = int(r.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))
    assert len(cli.json("busy")) == 32
    hgetalls = int(r.info("commandstats")["cmdstat_hgetall"]["calls"]) - before
    assert hgetalls == 31 * 2 + 32  # the registry's work hashes (two keys each) and one HGETALL per job, pipelined


def test_cancel_marks_once_and_says_what_happens_next(cli: Cli, r: redis.Redis) -> None:
    running(r)
    out = cli("cancel", ITERABLE, PLAIN)
    assert f"{ITERABLE}: cancelled; it stops at its next state flush (run 3)" in out
    assert f"{PLAIN}: cancelled; it has no iteration state yet" in out
    first = state.read(r, ITERABLE)
    assert first is not None and first.cancelled_at is not None and abs(first.cancelled_at - time.time()) < 30
    assert r.ttl(f"it-{PLAIN}") > 0  # the mark of a job not started expires like a state
    again = json.loads(cli("cancel", ITERABLE, "--json"))
    assert again == {
        "ok": True,
        "cancelled": [{"jid": ITERABLE, "cancelled_at": first.cancelled_at, "started": True, "again": True}],
    }
    assert "already cancelled at" in cli("cancel", ITERABLE)
    assert "(cancelled)" in cli("busy")


def test_cancel_refuses_what_is_no_jid_and_cancels_nothing(cli: Cli, r: redis.Redis) -> None:
    error = cli("cancel", ITERABLE, "it-aaaa aaaa", code=2)
    assert "not a job id: 'it-aaaa aaaa'; give the job's jid (24 hex digits)" in error
    assert state.read(r, ITERABLE) is None
