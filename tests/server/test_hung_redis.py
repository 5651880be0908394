"""A hung Redis (its process SIGSTOPped: connections stay open, nothing answers) against a real worker (run in this
process): every Redis call times out (``redis_timeout``) instead of blocking for ever, the outage is logged once, a
blocking fetch is not taken for a hung server, and a stop still exits within ``-t`` + 2 s."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import kiq
from tests.jobs.basic import Sleepy
from tests.outage_support import AofRedis, aof_redis
from tests.support import FAST, InProcessWorker, wait_until

pytestmark = pytest.mark.slow  # a redis-server of its own, hung

TIMEOUT = 1.0  # the worker's redis_timeout: shorter than its fetches' 2 s block, which must not count as hung
STOP_TIMEOUT = 1.0  # -t


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AofRedis]:
    with aof_redis(tmp_path / "redis") as own:
        yield own
        if own.process is not None and own.process.poll() is None:
            os.kill(own.process.pid, signal.SIGCONT)


def outage_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "is unreachable" in line]


def test_a_hung_redis_is_one_outage_and_a_stop_still_exits_within_t_plus_2_s(server: AofRedis) -> None:
    config = kiq.Config(redis_url=server.url)
    env = {**FAST, "KIQ_REDIS_TIMEOUT": str(TIMEOUT)}
    args = ["-r", "tests.jobs.basic", "-q", "default", "-c", "2", "-t", str(STOP_TIMEOUT)]
    with InProcessWorker(args, server.url, env) as worker:
        jid = kiq.Client(config).push({"class": Sleepy, "args": [30], "retry": False})
        watch = server.client()
        wait_until(lambda: watch.llen("started") == 1, 30, message="the job running")
        time.sleep(3 * TIMEOUT)  # idle fetches block 2 s each: longer than redis_timeout, and no outage
        assert outage_lines(worker.output()) == [], worker.output()[-2000:]

        assert server.process is not None
        os.kill(server.process.pid, signal.SIGSTOP)  # hung: connections open, no reply
        wait_until(lambda: outage_lines(worker.output()), 10 * TIMEOUT, message="the outage logged")
        time.sleep(3 * TIMEOUT)  # fetches and heartbeats keep timing out meanwhile
        began = time.monotonic()
        worker.signal(signal.SIGTERM)
        worker.wait(30)
        took = time.monotonic() - began
    output = worker.output()
    # the stop's bound (EXIT_GRACE) plus room for a loaded machine; without timeouts it exits at its bound too,
    # but every thread stays blocked on the hung server, and nothing says why
    assert took < STOP_TIMEOUT + 2 + 1.5, (took, output[-3000:])
    assert len(outage_lines(output)) == 1, output[-3000:]
    # the stop went on past the hung calls: the running job's requeue timed out, and is logged to replay it (without
    # timeouts the stop hung in its first Redis call, and the job was lost without a word)
    replay = [line for line in output.splitlines() if "unwritten job outcome" in line and str(jid) in line]
    assert len(replay) == 1, output[-3000:]
    config.redis.close()
