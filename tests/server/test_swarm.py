"""``kiq worker -p N``: a parent and N forked workers, each its own process in the registry; the parent restarts a
child that dies, replaces one over ``max_memory_mb``, passes signals on, and its children do not outlive it."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

import kiq
from kiq.api import ProcessSet
from tests.jobs.basic import Sleepy
from tests.support import FAST, FAST_RECOVERY, InProcessWorker, WorkerProcess, wait_until
from tests.swarm_support import alive, children

pytestmark = pytest.mark.slow
StartWorker = Callable[..., WorkerProcess]
JOBS = ("-r", "tests.jobs.basic")


def three(r: redis.Redis, swarm: WorkerProcess) -> dict[int, dict[str, Any]]:
    return wait_until(lambda: len(found := children(r, swarm.pid)) == 3 and found, 30, message="3 children")


def test_a_swarm_runs_jobs_in_every_child_and_stops_with_its_parent(
    start_worker_process: StartWorker, e2e_config: kiq.Config
) -> None:
    r = e2e_config.redis
    swarm = start_worker_process("-r", "tests.server.test_swarm", "-p", "2", env=FAST)
    found = wait_until(lambda: len(c := children(r, swarm.pid)) == 2 and c, 30, message="2 children")
    assert {info["pid"] for info in found.values()}.isdisjoint({swarm.pid})
    WhoRuns.perform_bulk([[n] for n in range(300)])
    wait_until(lambda: r.llen("ran_in") == 300, 30)
    assert {int(pid) for pid in r.lrange("ran_in", 0, -1)} == {info["pid"] for info in found.values()}  # both took jobs
    swarm.signal(signal.SIGTERM)  # the parent only: it passes the stop on
    assert swarm.wait(30) == 0
    assert not any(alive(info["pid"]) for info in found.values())
    assert r.scard("processes") == 0  # every child deregistered itself
    assert "swarm of 2 worker processes started" in swarm.output() and "swarm stopped" in swarm.output()


def test_a_dead_child_is_restarted_and_signals_reach_every_child(
    start_worker_process: StartWorker, e2e_config: kiq.Config
) -> None:
    r = e2e_config.redis
    Sleepy.perform_bulk([[0.5]] * 60)  # in flight when a child is killed: its jobs must come back (reliable fetch)
    swarm = start_worker_process(*JOBS, "-p", "3", "-c", "4", "--fetch", "reliable", env=FAST_RECOVERY)
    before = three(r, swarm)
    wait_until(lambda: r.llen("started") >= 12, 30, message="every child busy")
    os.kill(before[1]["pid"], signal.SIGKILL)
    wait_until(lambda: children(r, swarm.pid).get(1, {}).get("pid") not in (None, before[1]["pid"]), 30)
    assert f"swarm child 1 (pid {before[1]['pid']}) exited with -9" in swarm.output()
    wait_until(lambda: len(set(r.lrange("finished", 0, -1))) == 60, 60, message="every job, the killed child's too")
    swarm.signal(signal.SIGTTIN)  # thread dumps from every child
    wait_until(lambda: swarm.output().count("thread kiq-default-0") >= 3, 10, message="3 dumps")
    swarm.signal(signal.SIGTSTP)  # quiet every child
    wait_until(lambda: all(r.hget(i["identity"], "quiet") == "true" for i in children(r, swarm.pid).values()), 10)
    assert swarm.stop() == 0


def test_children_stop_when_the_parent_is_killed(start_worker_process: StartWorker, e2e_config: kiq.Config) -> None:
    r = e2e_config.redis
    swarm = start_worker_process(*JOBS, "-p", "2", env=FAST)
    found = wait_until(lambda: len(c := children(r, swarm.pid)) == 2 and c, 30)
    swarm.kill()  # SIGKILL: no chance to pass anything on
    for info in found.values():
        wait_until(lambda pid=info["pid"]: not alive(pid), 30, message=f"orphan child {info['pid']} to stop")
    wait_until(lambda: r.scard("processes") == 0, 10, message="the children to deregister (a graceful stop)")


def test_kill_9_of_the_whole_tree_loses_no_job_with_reliable_fetch(
    start_worker_process: StartWorker, start_worker: Callable[..., InProcessWorker], e2e_config: kiq.Config
) -> None:
    r = e2e_config.redis
    Sleepy.perform_bulk([[0.3]] * 60)
    swarm = start_worker_process(*JOBS, "-p", "2", "-c", "3", "--fetch", "reliable", env=FAST_RECOVERY)
    found = wait_until(lambda: len(c := children(r, swarm.pid)) == 2 and c, 30)
    wait_until(lambda: r.llen("started") >= 10, 30)
    for pid in [swarm.pid, *(info["pid"] for info in found.values())]:
        os.kill(pid, signal.SIGKILL)
    assert r.llen("finished") < 60
    survivor = start_worker(*JOBS, "-c", "10", "--fetch", "reliable", env=FAST_RECOVERY)  # never killed: in-process
    wait_until(lambda: len(set(r.lrange("finished", 0, -1))) == 60, 60, message="every job to finish")
    assert survivor.stop() == 0 and r.zcard("dead") == 0


def test_a_child_over_its_memory_limit_is_replaced(start_worker_process: StartWorker, e2e_config: kiq.Config) -> None:
    r = e2e_config.redis
    swarm = start_worker_process("-r", "tests.server.test_swarm", "-p", "1", env={**FAST, "KIQ_MAX_MEMORY_MB": "150"})
    first = wait_until(lambda: children(r, swarm.pid).get(0), 30)
    Hog.perform_async(200)
    wait_until(lambda: children(r, swarm.pid).get(0, {}).get("pid") not in (None, first["pid"]), 30)
    assert "over max_memory_mb 150: stopping it to replace it" in swarm.output()
    assert swarm.stop() == 0


def test_children_stopped_from_the_api_are_not_replaced(
    start_worker_process: StartWorker, e2e_config: kiq.Config
) -> None:
    r = e2e_config.redis
    swarm = start_worker_process(*JOBS, "-p", "2", env=FAST)
    wait_until(lambda: len(children(r, swarm.pid)) == 2, 30)
    ProcessSet(e2e_config).stop()  # every process, through the registry (Sidekiq's Web UI does the same)
    assert swarm.wait(30) == 0  # no child left: the parent exits too
    assert "restarting" not in swarm.output()


class WhoRuns(kiq.Job):
    """Records the pid of the process that ran it."""

    kiq_name = "tests.WhoRuns"

    def perform(self, n: int) -> None:
        time.sleep(0.005)
        kiq.default_config().redis.rpush("ran_in", os.getpid())


class Hog(kiq.Job):
    """Holds ``mb`` megabytes for a while: a leak, as far as the swarm's memory check can tell."""

    kiq_name = "tests.Hog"
    held: list[bytearray] = []

    def perform(self, mb: int) -> None:
        Hog.held.append(bytearray(mb * 1024 * 1024))
        time.sleep(5)


SWARM_EVENTS = "SWARM_TEST_EVENTS_FILE"  # the environment variable naming SwarmEvents' file (no KIQ_*: no setting)


class SwarmEvents:
    """Appends each swarm hook's call, and the pid it ran in, to the file named by ``SWARM_TEST_EVENTS_FILE``."""

    def _write(self, *fields: object) -> None:
        with open(os.environ[SWARM_EVENTS], "a") as file:
            file.write(" ".join(str(field) for field in (*fields, os.getpid())) + "\n")

    @kiq.hookimpl
    def kiq_swarm_startup(self) -> None:
        self._write("startup")

    @kiq.hookimpl
    def kiq_swarm_child_exited(self, index: int, pid: int, code: int) -> None:
        self._write("exited", index, pid, code)

    @kiq.hookimpl
    def kiq_swarm_stopping(self) -> None:
        self._write("stopping")

    @kiq.hookimpl
    def kiq_swarm_shutdown(self) -> None:
        self._write("shutdown")


def test_the_swarm_hooks_run_in_the_parent_at_its_start_each_reaped_child_its_stop_and_its_end(
    start_worker_process: StartWorker, e2e_config: kiq.Config, tmp_path: Path
) -> None:
    r = e2e_config.redis
    events = tmp_path / "events"
    plugin = ("--plugins", "tests.server.test_swarm:SwarmEvents")
    swarm = start_worker_process(*JOBS, *plugin, "-p", "2", env={**FAST, SWARM_EVENTS: str(events)})
    found = wait_until(lambda: len(c := children(r, swarm.pid)) == 2 and c, 30, message="2 children")
    os.kill(found[0]["pid"], signal.SIGKILL)
    wait_until(lambda: children(r, swarm.pid).get(0, {}).get("pid") not in (None, found[0]["pid"]), 30)
    assert swarm.stop() == 0
    lines = [line.split() for line in events.read_text().splitlines()]
    assert {line[-1] for line in lines} == {str(swarm.pid)}  # the parent's hooks: never run in a child
    assert lines[0] == ["startup", str(swarm.pid)]
    assert lines[1] == ["exited", "0", str(found[0]["pid"]), "-9", str(swarm.pid)]
    assert lines[2] == ["stopping", str(swarm.pid)]
    assert sorted(line[1] for line in lines[3:5]) == ["0", "1"] and {line[0] for line in lines[3:5]} == {"exited"}
    assert {line[3] for line in lines[3:5]} == {"0"}  # a graceful stop
    assert lines[5:] == [["shutdown", str(swarm.pid)]]
