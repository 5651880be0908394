"""A finished job's acknowledgement reaches Redis promptly on an idle worker too, so a worker killed afterwards
leaves no finished job behind to run again or to count against the interrupt cap (issue 29, item 3); one that
Redis refuses is kept and sent once Redis is back."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

import kiq
import kiq.ext
from kiq.embedded import EmbeddedRedis
from kiq.plugins.reliable_fetch.acks import AckSender
from kiq.plugins.reliable_fetch.keys import alive_key, working_key
from kiq.plugins.reliable_fetch.ledger import Ledger
from tests.jobs.reliable import DONE, RUNS_BY_JID, Tick
from tests.support import InProcessWorker, WorkerProcess, wait_until
from tests.swarm_support import VictimSwarm

StartWorker = Callable[..., WorkerProcess]
StartInProcess = Callable[..., InProcessWorker]

RELIABLE = {"KIQ_HEARTBEAT_INTERVAL": "1", "KIQ_PLUGINS": "reliable_fetch", "KIQ_RELIABLE_RECOVERY_INTERVAL": "1"}
ARGS = ("-r", "tests.jobs.reliable", "-q", "default", "-c", "10", "--fetch", "reliable")
IDLE_BEFORE_KILL = 0.4  # the scenario of the issue: the jobs finished, the worker idle this long, then kill -9
GHOST = "ghost:1:000000000000"  # the owner of a planted orphan list: no such process is alive


def recovery_pass_after(r: redis.Redis, round_no: int) -> None:
    """Wait until a recovery pass has run since now: plant an orphan list holding one Tick job and wait until
    it ran (a pass that SCANs the planted list finds every orphan listed before it too)."""
    jid = f"{round_no:024x}"
    job = kiq.ext.dumps({"class": "ReliableTick", "args": [1], "jid": jid, "queue": "default", "retry": True})
    r.lpush(working_key(GHOST, f"round{round_no}"), job)
    wait_until(lambda: r.hget(RUNS_BY_JID, jid), 30, message="a recovery pass")


def test_finished_jobs_on_an_idle_worker_killed_later_never_run_again(
    e2e_config: kiq.Config, start_worker_process: StartWorker, start_worker: StartInProcess
) -> None:
    r = e2e_config.redis
    jids = Tick.perform_bulk([[20]] * 4)
    # one worker process at a time, a new one after each kill: a swarm of one child, whose parent starts a new child
    # in place of each one killed
    swarm = VictimSwarm(start_worker_process, r, 1, *ARGS, **RELIABLE)
    for round_no in range(1, 4):
        [child] = swarm.ready().values()  # the round's worker: a new process, a new identity
        identity = child["identity"]
        if round_no == 1:
            wait_until(lambda: r.scard(DONE) == len(jids), 30, message="the 4 jobs")
        else:
            recovery_pass_after(r, round_no)  # whatever the last victim left would have run by now
        time.sleep(IDLE_BEFORE_KILL)  # the worker sits idle (the scenario, not a wait for a condition)
        victim = swarm.kill()
        assert victim["identity"] == identity
        # nothing finished is still listed as in flight: there is nothing to recover, run again or count
        assert r.lrange(working_key(identity, "default"), 0, -1) == []
        alive_now = alive_key(identity)
        wait_until(lambda: not r.exists(alive_now), 10, message="the victim's liveness to expire")  # noqa: B023
    assert swarm.stop() == 0, swarm.output()
    worker = start_worker(*ARGS, env=RELIABLE)  # never killed: in this process
    recovery_pass_after(r, 4)
    assert {jid: r.hget(RUNS_BY_JID, jid) for jid in jids} == {jid: "1" for jid in jids}
    assert r.zcard("dead") == 0
    assert worker.stop() == 0, worker.output()


def test_acknowledgements_redis_refuses_are_kept_and_sent_once_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = EmbeddedRedis(tmp_path / "redis")
    client = redis.Redis.from_url(server.ensure_running(), decode_responses=True)
    key = working_key("host:1:bbbbbbbbbbbb", "default")
    client.lpush(key, "job-1", "job-2", "job-3")  # job-3 still runs
    ledger = Ledger([key])
    ledger.fetched((key, job) for job in ("job-1", "job-2", "job-3"))
    acks = AckSender(client, ledger, delay=0.01)
    caplog.set_level(logging.DEBUG, logger="kiq.reliable_fetch")  # unreachable: DEBUG, the fetch logs the outage
    try:
        server.stop()  # the list is saved with the server (append-only file)
        ledger.finish(key, "job-1")
        acks.due()
        wait_until(lambda: "could not send acknowledgements" in caplog.text, 10, message="the outage warning")
        ledger.finish(key, "job-2")
        acks.due()
        server.ensure_running()
        wait_until(lambda: "reaching Redis again" in caplog.text, 20, message="the recovery message")
        assert client.lrange(key, 0, -1) == ["job-3"]  # both sent, none dropped
        assert caplog.text.count("could not send acknowledgements") == 1  # one line per outage, not per attempt
        assert not [
            record
            for record in caplog.records
            if record.name == "kiq.reliable_fetch" and record.levelno >= logging.WARNING
        ]
    finally:
        acks.stop()
        client.close()
        server.stop()


def test_the_ledger_keeps_the_order_of_a_working_list_through_acks_out_of_order_requeues_and_twins(
    r: redis.Redis,
) -> None:
    """Finished jobs leave by count when they are the oldest, by LREM when an older one runs, a requeue takes the
    oldest equal entry: after any mix of these (identical payloads included), the list holds exactly the jobs
    still running, and the ledger's trims cut nothing else."""
    import random

    from kiq.plugins.reliable_fetch import scripts
    from kiq.plugins.reliable_fetch.acks import send_acks

    key = working_key("host:1:cccccccccccc", "default")
    ledger = Ledger([key])
    rng = random.Random(43)
    running: list[str] = []  # the units in hand (a multiset of payloads)
    for step in range(400):
        action = rng.random()
        if action < 0.4 or not running:
            jobs = [f"job-{rng.randrange(8)}" for _ in range(rng.randrange(1, 4))]  # twins are frequent
            r.lpush(key, *jobs)
            ledger.fetched((key, job) for job in jobs)
            running += jobs
        elif action < 0.85:
            job = running.pop(rng.randrange(len(running)))
            ledger.finish(key, job)
        else:
            job = running.pop(rng.randrange(len(running)))
            count, newest = ledger.take_cut(key)
            commands = [scripts.trim_command(key, count, newest)] if count else []
            commands.append(scripts.requeue_command(kiq.ext.keyspace(r), key, "default", job, "front"))
            replies = kiq.ext.run_pipeline(r, commands)
            if count:
                assert replies[0] == count
                ledger.confirm(key)
            assert replies[-1] == 1
            ledger.removed(key, job, finished=False)
        if rng.random() < 0.3:
            send_acks(r, ledger)
        assert not ledger.unsure, step
    send_acks(r, ledger)
    assert sorted(r.lrange(key, 0, -1)) == sorted(running)
