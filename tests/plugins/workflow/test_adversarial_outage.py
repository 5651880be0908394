"""Redis stopped while workflow steps run and finish, on real workers (in this process: the outage, not the worker's
process, is the subject) and a redis-server of the test's own (AOF, ``appendfsync always``;
tests/outage_support.py), for 3 s (60 s: test_adversarial_long_outage.py), and at maxmemory.

A step that ends during the outage cannot record its result nor push its successor: the worker must hold that
outcome (the step unacknowledged) and write it once Redis is back, so every chain ends with its fold, every chord
body runs once with its members' results, no step dies of the outage (the steps here have ``retry: 0``, so an
outage taken for a failure would fail its workflow) and the outage is logged once, not once per step. Steps note
their runs in a file, not in Redis, so only the workflow's own writes meet the outage."""

from __future__ import annotations

import collections
import contextlib
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import kiq
from kiq.plugins import workflow
from kiq.plugins.workflow import chain, chord
from tests.jobs.workflow_adversarial import AsyncFileStep, FileCollect, FileStep
from tests.outage_support import AofRedis, aof_redis
from tests.support import FAST, InProcessWorker, wait_until

pytestmark = pytest.mark.slow
BACK_WITHIN = 30.0  # seconds after Redis returns by which every workflow must have finished
KILLS = 5  # kills of Redis at most, until one catches a step in flight (see in_a_step)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AofRedis]:
    with aof_redis(tmp_path / "redis") as aof:
        yield aof


@pytest.fixture
def config(server: AofRedis) -> Iterator[kiq.Config]:
    config = kiq.Config(redis_url=server.url, plugins=["workflow"])
    yield config
    config.redis.close()


def noted(path: Path) -> list[tuple[str, str]]:
    """``(step, enqueued_at)`` of every run noted in ``path`` (tests.jobs.workflow_adversarial.noted)."""
    text = path.read_text() if path.exists() else ""
    return [(step, pushed) for step, _, pushed in (line.partition("@") for line in text.split())]


def runs(path: Path) -> collections.Counter[str]:
    """How many times each step ran."""
    return collections.Counter(step for step, _ in noted(path))


def ran(path: Path) -> int:
    """How many runs were noted."""
    return sum(runs(path).values())


def ran_at_least(path: Path, count: int) -> Callable[[], bool]:
    """Whether ``count`` runs were noted, asked when called."""
    return lambda: ran(path) >= count


def pushes(path: Path) -> dict[str, int]:
    """How many times each step that ran was pushed: its runs' distinct ``enqueued_at`` (a redelivery keeps it)."""
    found: dict[str, set[str]] = collections.defaultdict(set)
    for step, pushed in noted(path):
        found[step].add(pushed)
    return {step: len(times) for step, times in found.items()}


def start_workflows(config: kiq.Config, step: type[kiq.Job]) -> tuple[list[workflow.Workflow], list[workflow.Workflow]]:
    chains = [chain(step.s(n, ms=150), step.s(ms=150), step.s(ms=150)).perform_async(config) for n in range(16)]
    chords = [
        chord([step.s(n * 10 + m, ms=150) for m in range(4)], FileCollect.s()).perform_async(config) for n in range(8)
    ]
    return chains, chords


def held(worker: InProcessWorker) -> int:
    """How many job outcomes the worker holds until Redis takes them (its OutcomeKeeper)."""
    launcher = worker.worker.launcher
    assert launcher is not None
    return launcher.keeper.held


def in_a_step(workers: list[InProcessWorker], runs_file: Path) -> bool:
    """Whether a thread of the workers is likely in the middle of a 150 ms step: one runs a job, and the last run was
    noted 30 to 90 ms ago (the threads that ended then fetched their next steps at once). The threads run their
    steps in rounds: an outage that begins as a round ends (as a count of runs is reached) finds every thread
    writing an outcome or fetching, none in a step, and no step ends in the outage."""
    launchers = [worker.worker.launcher for worker in workers]
    busy = any(
        slot.work is not None for launcher in launchers if launcher for m in launcher.managers for slot in m.slots()
    )
    return busy and runs_file.exists() and 0.03 <= time.time() - runs_file.stat().st_mtime <= 0.09


def run_through_outage(server: AofRedis, config: kiq.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       fetch: str, outage: float, step: type[kiq.Job] = FileStep,
                       maxmemory: bool = False) -> None:  # fmt: skip
    """Two workers: an outage longer than a worker's liveness lets the other's recovery take its working list back
    (reliable fetch) as Redis returns, so a step may run twice; it must still be pushed once."""
    runs_file = tmp_path / "runs.txt"
    monkeypatch.setenv("WF_ADV_RUNS_FILE", str(runs_file))  # read by the steps, in this process
    problem = "is out of memory" if maxmemory else "is unreachable"
    chains, chords = start_workflows(config, step)
    plugins = "workflow reliable_fetch" if fetch == "reliable" else "workflow"
    env = {**FAST, "KIQ_PLUGINS": plugins, "KIQ_RELIABLE_RECOVERY_INTERVAL": "1"}
    args = ["-r", "tests.jobs.workflow_adversarial", "-c", "4", "--fetch", fetch]
    with contextlib.ExitStack() as stack:
        workers = [stack.enter_context(InProcessWorker(args, server.url, env)) for _ in range(2)]
        wait_until(lambda: ran(runs_file) >= 12, 60, message="steps running before the outage")
        wait_until(lambda: in_a_step(workers, runs_file), 30, interval=0.01, message="a step half-way")
        # reliable fetch: killed mid-traffic; basic fetch: between two commands (a pop whose reply is lost loses its
        # job, basic fetch's at-most-once window by design, not what this test is about)
        if maxmemory:  # Redis answers, and refuses every write
            config.redis.config_set("maxmemory", 1)
        else:
            server.stop("kill" if fetch == "reliable" else "pause")
        ended_before = ran(runs_file)
        for worker in workers:
            wait_until(lambda w=worker: problem in w.output(), 30, message="the outage in each worker's log")
        wait_until(lambda: ran(runs_file) > ended_before, 30, message="a step ending in the outage")
        time.sleep(outage)  # the outage's length, not a wait for a condition
        if maxmemory:
            config.redis.config_set("maxmemory", 0)
        else:
            server.start()

        def finished() -> bool:
            return all(workflow.status(wf.id, config).state != "running" for wf in chains + chords)  # type: ignore[union-attr]

        wait_until(finished, BACK_WITHIN, interval=0.2, message="every workflow to finish after the outage")
        for worker in workers:
            wait_until(lambda w=worker: "Redis works again" in w.output(), 10, message="the end in each log")
        assert [worker.stop() for worker in workers] == [0, 0]
        outputs = [worker.output() for worker in workers]
    assert [wf.result() for wf in chains] == [n + 3 for n in range(16)], outputs
    assert [wf.result() for wf in chords] == [sum(n * 10 + m + 1 for m in range(4)) for n in range(8)], outputs
    counted, pushed = runs(runs_file), pushes(runs_file)
    assert len(counted) == 16 * 3 + 8 * 5  # every step ran
    assert set(pushed.values()) == {1}, pushed  # each step (each successor, each chord body) pushed once
    assert max(counted.values()) <= 2, counted  # at most a redelivery
    # per worker, the outage is logged once, and the steps' outcomes went through the held path, not a line each
    held = 0
    for output in outputs:
        assert output.count(problem) == 1 and output.count("Redis works again") == 1, output
        found = re.search(r"; (\d+) job outcomes held meanwhile are written", output)
        held += int(found.group(1)) if found else 0
        assert "could not record" not in output and "Traceback" not in output and "Adding dead" not in output
    assert held >= 1, outputs
    client = server.client()
    assert client.zcard("retry") == 0 and client.zcard("dead") == 0
    assert not list(client.scan_iter("kiq:working:*")) and client.llen("queue:default") == 0
    print(f"\n{held} step outcomes held; {sum(count > 1 for count in counted.values())} steps delivered twice")


@pytest.mark.parametrize("fetch", ["reliable", "basic"])
def test_steps_ending_during_a_3s_outage_push_their_successors_once_when_redis_is_back(
    server: AofRedis, config: kiq.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fetch: str
) -> None:
    run_through_outage(server, config, tmp_path, monkeypatch, fetch, 3.0)


def test_async_steps_ending_during_a_3s_outage_push_their_successors_once_when_redis_is_back(
    server: AofRedis, config: kiq.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_through_outage(server, config, tmp_path, monkeypatch, "reliable", 3.0, AsyncFileStep)


def test_steps_ending_while_redis_is_at_maxmemory_push_their_successors_once_when_it_takes_writes(
    server: AofRedis, config: kiq.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_through_outage(server, config, tmp_path, monkeypatch, "reliable", 3.0, maxmemory=True)


def caught_a_step(worker: InProcessWorker, runs_file: Path, ended_before: int, within: float) -> bool:
    """Whether, within ``within`` s of a kill of Redis, a step ended (noted after ``ended_before`` runs) and the
    worker holds an outcome Redis refused."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if ran(runs_file) > ended_before and held(worker) > 0:
            return True
        time.sleep(0.05)
    return False


def test_a_worker_stopped_while_redis_is_down_leaves_its_held_steps_to_run_again_and_pushes_each_successor_once(
    server: AofRedis, config: kiq.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs_file = tmp_path / "runs.txt"
    monkeypatch.setenv("WF_ADV_RUNS_FILE", str(runs_file))  # read by the steps, in this process
    chains, chords = start_workflows(config, FileStep)
    env = {**FAST, "KIQ_PLUGINS": "workflow reliable_fetch", "KIQ_RELIABLE_RECOVERY_INTERVAL": "1"}
    args = ["-r", "tests.jobs.workflow_adversarial", "-c", "6", "--fetch", "reliable"]
    with InProcessWorker([*args, "-t", "2"], server.url, env) as stopped:
        wanted = 12  # runs before a kill
        for kill in range(1, KILLS + 1):
            wait_until(ran_at_least(runs_file, wanted), 60, message="steps running before the outage")
            wait_until(lambda: in_a_step([stopped], runs_file), 30, interval=0.01, message="a step half-way")
            # counted before the kill: counted after it, a test process slowed by load could miss the steps in flight
            ended_before = ran(runs_file)
            server.stop("kill")
            if caught_a_step(stopped, runs_file, ended_before, 5):
                break
            # the test process, slowed by load, killed it later than it looked: Redis back, more steps run, again
            assert kill < KILLS, f"none of {KILLS} kills of Redis caught a step ending in the outage"
            server.start()
            wanted = ran(runs_file) + 6
        assert stopped.stop() != 0  # it gave up the held outcomes: the steps stay in its working list
        output = stopped.output()
    assert "unwritten job outcome" in output and "Traceback" not in output, output
    print(f"\n{kill} kill(s) of Redis\n" + "\n".join(line for line in output.splitlines() if "unwritten" in line)[:600])
    ran_before = runs(runs_file)
    server.start()
    with InProcessWorker(args, server.url, env) as worker:  # recovers the stopped one's list

        def finished() -> bool:
            return all(workflow.status(wf.id, config).state != "running" for wf in chains + chords)  # type: ignore[union-attr]

        wait_until(finished, 60, interval=0.2, message="every workflow to finish")
        assert worker.stop() == 0
    assert [wf.result() for wf in chains] == [n + 3 for n in range(16)]
    assert [wf.result() for wf in chords] == [sum(n * 10 + m + 1 for m in range(4)) for n in range(8)]
    counted = runs(runs_file)
    again = {name for name, count in counted.items() if count > 1}
    assert again and again <= set(ran_before), (again, ran_before)  # only steps of the stopped worker ran twice
    # each successor pushed once: a step the stopped worker had not ended ran once, the others at most twice
    assert all(count == 1 for name, count in counted.items() if name not in ran_before), counted
    assert max(counted.values()) == 2 and len(counted) == 16 * 3 + 8 * 5
    assert set(pushes(runs_file).values()) == {1}  # each step pushed once, the ones run twice delivered twice
