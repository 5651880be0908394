"""``kiq queues NAME`` lists a queue's jobs; ``kiq queues --clear NAME`` empties it (asking first on a terminal)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time

import redis

import kiq
from tests.cli.helpers import Cli, job_json


def fill(r: redis.Redis, queue: str, *jids: str) -> None:
    """Push the jobs as a client would, oldest first (so the last one is the newest)."""
    now = time.time()
    for age, jid in zip(range(len(jids), 0, -1), jids, strict=True):
        r.lpush(f"queue:{queue}", job_json(jid, queue=queue, enqueued_at=now - 60 * age))
    r.sadd("queues", queue)


def test_a_queue_lists_its_jobs_newest_first(cli: Cli, r: redis.Redis) -> None:
    fill(r, "low", "first", "second", "third")
    lines = cli("queues", "low").splitlines()
    assert lines[0].split() == ["JID", "CLASS", "ENQUEUED", "RETRIED", "ARGS", "ERROR"]
    assert [line.split()[0] for line in lines[1:]] == ["third", "second", "first"]
    assert "HardJob" in lines[1] and "(1m ago)" in lines[1] and '["third", 1]' in lines[1]

    *rows, remainder = cli("queues", "low", "--limit", "2").splitlines()
    assert [row.split()[0] for row in rows[1:]] == ["third", "second"]
    assert remainder == "(2 of 3 in queue 'low', newest first; --limit 0 lists all)"
    listed = cli.json("queues", "low", "-n", "2")
    assert [(job["jid"], job["queue"]) for job in listed] == [("third", "low"), ("second", "low")]
    assert listed[0]["args"] == ["third", 1]

    r.sadd("queues", "empty")
    assert cli("queues", "empty").strip() == "(none)"
    assert "no queue 'lo' (did you mean 'low'?)" in cli("queues", "lo", code=2)


def test_clear_deletes_a_queue_and_says_how_many_jobs(cli: Cli, r: redis.Redis) -> None:
    fill(r, "low", "a", "b", "c")
    fill(r, "default", "keep")
    # not on a terminal (stdin is pytest's): no question
    assert cli("queues", "--clear", "low").strip() == "deleted 3 jobs from queue 'low'"
    assert not r.exists("queue:low") and r.smembers("queues") == {"default"}
    assert cli.json("queues", "--clear", "default", "--yes") == {
        "ok": True,
        "action": "clear",
        "queue": "default",
        "count": 1,
    }
    assert "no queue 'low'" in cli("queues", "--clear", "low", code=2)


def test_clear_asks_on_a_terminal(config: kiq.Config, r: redis.Redis) -> None:
    fill(r, "low", "a", "b")

    def clear(answer: str | None, *flags: str) -> subprocess.CompletedProcess[bytes]:
        """``kiq queues --clear low`` with a terminal as stdin; ``answer`` is typed when not None."""
        controller, terminal = pty.openpty()
        try:
            command = [sys.executable, "-m", "kiq", "queues", "--clear", "low", "--redis-url", str(config.redis_url)]
            process = subprocess.Popen(
                [*command, *flags], stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            if answer is not None:
                os.write(controller, answer.encode() + b"\n")
            stdout, stderr = process.communicate(timeout=60)
        finally:
            os.close(controller)
            os.close(terminal)
        return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)

    refused = clear("n")
    assert b"Delete the 2 jobs in queue 'low'? [y/N]" in refused.stderr
    assert refused.returncode == 1 and b"nothing deleted" in refused.stderr
    assert r.llen("queue:low") == 2

    accepted = clear("y")
    assert accepted.returncode == 0 and accepted.stdout.strip() == b"deleted 2 jobs from queue 'low'"
    assert r.llen("queue:low") == 0

    fill(r, "low", "c")
    unasked = clear(None, "--yes")
    assert unasked.returncode == 0 and b"[y/N]" not in unasked.stderr and r.llen("queue:low") == 0


def test_pause_and_unpause_a_queue_and_the_listing_shows_it(cli: Cli, r: redis.Redis) -> None:
    fill(r, "low", "a")
    fill(r, "default", "b")
    assert cli("queues", "pause", "low").strip() == "paused queue 'low'"
    assert r.smembers("kiq:paused") == {"low"} and kiq.Queue("low").paused
    assert cli("queues", "pause", "low").strip() == "queue 'low' was already paused"
    rows = [line.split() for line in cli("queues").splitlines()]
    assert rows[0] == ["QUEUE", "SIZE", "LATENCY", "PAUSED"]
    assert [(row[0], row[3]) for row in rows[1:]] == [("default", "-"), ("low", "paused")]
    listed = {queue["name"]: queue["paused"] for queue in cli.json("queues")}
    assert listed == {"default": False, "low": True}

    assert cli.json("queues", "unpause", "low") == {"ok": True, "action": "unpause", "queue": "low", "changed": True}
    assert not r.exists("kiq:paused")
    assert r.llen("queue:low") == 1  # a pause touches no job


def test_pause_and_unpause_refuse_what_they_cannot_mean(cli: Cli, r: redis.Redis) -> None:
    fill(r, "low", "a")
    assert "no queue 'lo' (did you mean 'low'?)" in cli("queues", "pause", "lo", code=2)
    assert "queue 'low' is not paused; the paused queues are: none" in cli("queues", "unpause", "low", code=2)
    assert "name the queue, as in kiq queues pause QUEUE" in cli("queues", "pause", code=2)
    assert "only pause or unpause take a queue" in cli("queues", "low", "default", code=2)
    assert not r.exists("kiq:paused")


def test_a_paused_queue_stays_listed_while_empty(cli: Cli, r: redis.Redis) -> None:
    fill(r, "low", "a")
    assert cli("queues", "pause", "low").strip() == "paused queue 'low'"
    kiq.Queue("low").clear()  # clearing removes it from the queues set; the pause must still be visible
    assert {queue["name"]: queue["paused"] for queue in cli.json("queues")} == {"low": True}
    assert cli("queues", "unpause", "low").strip() == "unpaused queue 'low'"
    assert cli.json("queues") == []


def test_garbage_in_the_paused_set_is_counted_not_printed(cli: Cli, r: redis.Redis) -> None:
    """Any producer can write names into ``kiq:paused``: 1,000 of no queue and one of 100 KB printed 100 MB (each row
    padded to the widest name). The table lists the known queues, names cut, and counts the others."""
    fill(r, "low", "a")
    fill(r, "x" * 100_000, "b")  # a real queue with a huge name: listed, its name cut
    r.sadd("kiq:paused", *(f"junk-{n}" for n in range(1000)), "y" * 100_000, "low")
    out = cli("queues")
    assert len(out) < 5_000, len(out)
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["QUEUE", "SIZE", "LATENCY", "PAUSED"]
    assert [row[0] for row in rows[1:3]] == ["low", "x" * 99 + "…"] and rows[1][3] == "paused"
    assert out.splitlines()[-1] == (
        "(and 1,001 paused names of no known queue, not listed: kiq queues --json lists every name)"
    )
    assert len(cli.json("queues")) == 1003  # every name, for a script
    refused = cli("queues", "unpause", "nope", code=2)
    assert len(refused) < 2_000 and "and 982 more" in refused, refused[-200:]
