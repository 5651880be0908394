"""``kiq processes`` tells running, quiet and stale (killed: no heartbeat for 2.5 intervals) processes apart."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import kiq
from tests.cli.helpers import Cli
from tests.support import FAST, WorkerProcess, identity_of, wait_until


def register(r: redis.Redis, identity: str, beat_age: float, quiet: bool = False, **info: Any) -> None:
    """A process hash as a heartbeat writes it, ``beat_age`` seconds after its last beat."""
    details = {"identity": identity, "hostname": "box", "pid": 1, "concurrency": 5, "queues": ["default"], **info}
    r.sadd("processes", identity)
    fields = {"info": json.dumps(details), "busy": 0, "beat": time.time() - beat_age, "quiet": str(quiet).lower()}
    r.hset(identity, mapping=fields)
    r.expire(identity, 60)


def state_column(out: str, identity: str) -> str:
    """The STATE cell of ``identity``'s row (the columns after it: BEAT, which starts with a number)."""
    header, *rows = out.splitlines()
    start, end = header.index("STATE"), header.index("BEAT")
    row = next(row for row in rows if row.startswith(identity))
    return row[start:end].strip()


def test_a_process_without_recent_heartbeat_is_stale(cli: Cli, r: redis.Redis) -> None:
    register(r, "box:1:aaa", beat_age=1)
    register(r, "box:2:bbb", beat_age=1, quiet=True)
    register(r, "box:3:ccc", beat_age=35)  # says no interval (Ruby Sidekiq): 10 s, so stale after 25 s
    register(r, "box:4:ddd", beat_age=20)  # within 2.5 x 10 s
    register(r, "box:5:eee", beat_age=3, heartbeat_interval=0.5)  # beats every 0.5 s: stale after 1.25 s
    register(r, "box:6:fff", beat_age=35, quiet=True)  # a quiet process that was killed is stale too

    out = cli("processes")
    states = {identity: state_column(out, identity) for identity in ("box:1:aaa", "box:2:bbb", "box:4:ddd")}
    assert states == {"box:1:aaa": "running", "box:2:bbb": "quiet", "box:4:ddd": "running"}
    assert state_column(out, "box:3:ccc") == "stale (no heartbeat for 35s)"
    assert state_column(out, "box:5:eee") == "stale (no heartbeat for 3s)"
    assert state_column(out, "box:6:fff") == "stale (no heartbeat for 35s)"

    listed = {process["identity"]: process["state"] for process in cli.json("processes")}
    assert listed == {
        "box:1:aaa": "running",
        "box:2:bbb": "quiet",
        "box:3:ccc": "stale",
        "box:4:ddd": "running",
        "box:5:eee": "stale",
        "box:6:fff": "stale",
    }


@pytest.mark.slow
def test_a_real_worker_shows_quiet_at_once_and_stale_once_killed(
    start_worker_process: Callable[..., WorkerProcess], e2e_config: kiq.Config, capsys: pytest.CaptureFixture[str]
) -> None:
    r = e2e_config.redis
    cli = Cli(e2e_config, capsys)
    # a heartbeat every 30 s: the quiet state must not wait for the next one
    slow_beats = start_worker_process("-r", "tests.jobs.basic", env={"KIQ_HEARTBEAT_INTERVAL": "30"})
    identity = identity_of(r, slow_beats)
    assert state_column(cli("processes"), identity) == "running"
    slow_beats.signal(signal.SIGTSTP)
    wait_until(lambda: state_column(cli("processes"), identity) == "quiet", 10, message="quiet after TSTP")
    assert slow_beats.proc.poll() is None  # quiet, not suspended
    assert slow_beats.stop() == 0

    fast_beats = start_worker_process("-r", "tests.jobs.basic", env=FAST)  # every 0.5 s: stale 1.25 s after the last
    identity = identity_of(r, fast_beats)
    (listed,) = cli.json("processes")
    assert (listed["state"], listed["heartbeat_interval"]) == ("running", 0.5)
    fast_beats.signal(signal.SIGKILL)
    assert fast_beats.wait(30) == -signal.SIGKILL
    wait_until(lambda: state_column(cli("processes"), identity).startswith("stale (no heartbeat for "), 10)
    assert [process["state"] for process in cli.json("processes")] == ["stale"]
