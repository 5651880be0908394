"""An iterable job walking in a worker (the one ``kiq worker`` runs, in this process) while its Redis goes away
(killed for 3 s and for 60 s, then restarted from its AOF) or fills up (``maxmemory`` with ``noeviction``: every
write refused with OOM).

What holds: a save Redis refuses does not stop the walk; it is logged once, and the walk saves again as soon as
Redis takes it. An interruption (TERM) during the outage holds its save and its re-push until Redis is back; a
completion during the outage deletes the state once Redis is back. The jobs record their items in files, so what
ran is known however long Redis is away: every item runs once, none is skipped."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from kiq.iteration import state
from tests.iteration.adversarial_support import FLUSH, nothing_failed, own_redis, queued, run_worker
from tests.jobs.iteration_adversarial import AsyncFileWalk, FileWalk, hooks_run, items_run
from tests.outage_support import AofRedis
from tests.support import wait_until

REFUSED_SAVE = "Redis refused to save its cursor"
SAVED_AGAIN = "its cursor is saved again"
REFUSED_DELETE = "Redis refused to delete"
STOPPING = "shutting down: waiting up to"  # logged once a stop has quieted the worker (its jobs' stopping flag set)
HOLD_AT = 50  # the item at which the job waits for the test to take Redis away


def take_away(server: AofRedis, how: str) -> None:
    if how == "oom":
        server.client().config_set("maxmemory", 1)  # any write that may grow memory: OOM (noeviction is the default)
    else:
        server.stop("kill")


def give_back(server: AofRedis, how: str) -> None:
    if how == "oom":
        server.client().config_set("maxmemory", 0)
    else:
        server.start()


def saved_cursor(server: AofRedis, jid: str) -> object:
    saved = state.read(server.client(), jid)
    return None if saved is None else saved.cursor


def held_walk(base: Path, count: int, pause: float, job: type[FileWalk] = FileWalk) -> str:
    """Push a walk that waits at item ``HOLD_AT``; its jid once the worker holds it there."""
    jid = job.perform_async(count, pause, str(base), HOLD_AT)
    assert jid is not None
    wait_until(lambda: Path(f"{base}.holding").exists(), 60, message="the walk at its held item")
    return jid


@pytest.mark.parametrize(
    ("how", "seconds", "job"),
    [
        pytest.param("kill", 3.0, FileWalk, id="kill-3s"),
        pytest.param("kill", 3.0, AsyncFileWalk, id="kill-3s-async"),
        pytest.param("oom", 3.0, FileWalk, id="oom-3s"),
        pytest.param("kill", 60.0, FileWalk, marks=pytest.mark.soak, id="kill-60s"),  # make soak; 3 s: kill-3s
    ],
)
def test_a_walk_goes_on_through_an_outage_and_saves_when_redis_is_back(
    tmp_path: Path, how: str, seconds: float, job: type[FileWalk]
) -> None:
    base = tmp_path / "walk"
    with own_redis(tmp_path) as (server, _config), run_worker(server) as worker:
        jid = held_walk(base, 1_000_000, 0.002, job)
        take_away(server, how)
        began = time.monotonic()
        Path(f"{base}.go").touch()
        walked = len(items_run(base))
        wait_until(lambda: len(items_run(base)) >= walked + 200, 60, message="items walked during the outage")
        time.sleep(max(0.0, seconds - (time.monotonic() - began)))  # the outage's length, not a wait for a result
        during = len(items_run(base))
        give_back(server, how)
        wait_until(lambda: (saved_cursor(server, jid) or 0) > during, 60, message="a save after the outage")  # type: ignore[operator]

        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0
        r = server.client()
        saved = state.read(r, jid)
        assert saved is not None and saved.executions == 1
        # a TERM saves the cursor of the next item, not run yet: every item before it ran once, in order
        assert items_run(base) == list(range(saved.cursor))
        assert [job["jid"] for job in queued(r)] == [jid]
        nothing_failed(r)
        output = worker.output()
        assert output.count(REFUSED_SAVE) == 1 and output.count(SAVED_AGAIN) == 1, output[-3000:]


@pytest.mark.parametrize("how", ["kill", "oom"])
@pytest.mark.parametrize("job", [FileWalk, AsyncFileWalk], ids=["sync", "async"])
def test_an_interruption_during_an_outage_holds_its_save_and_re_push(
    tmp_path: Path, how: str, job: type[FileWalk]
) -> None:
    base = tmp_path / "walk"
    with own_redis(tmp_path) as (server, _config), run_worker(server) as worker:
        jid = held_walk(base, 1_000_000, 0.002, job)
        take_away(server, how)
        worker.signal(signal.SIGTERM)
        # the stop under way (every fetcher quieted, the jobs told to stop) before the held item ends
        wait_until(lambda: STOPPING in worker.output(), 60, message="the stop")
        Path(f"{base}.go").touch()
        wait_until(lambda: f"Interrupting {job.__qualname__}" in worker.output(), 60, message="the interruption")
        give_back(server, how)
        assert worker.wait(60) == 0
        r = server.client()
        saved = state.read(r, jid)
        # the held save was written before the re-push: the job resumes after the last item it ran
        assert saved is not None and saved.cursor == HOLD_AT + 1
        assert items_run(base) == list(range(HOLD_AT + 1))
        assert [job["jid"] for job in queued(r)] == [jid]
        nothing_failed(r)


def test_a_completion_during_an_outage_deletes_the_state_when_redis_is_back(tmp_path: Path) -> None:
    """(Under maxmemory UNLINK is allowed: only a stopped Redis refuses it.)"""
    base = tmp_path / "walk"
    with own_redis(tmp_path) as (server, _config), run_worker(server) as worker:
        jid = held_walk(base, HOLD_AT + 20, 0.0)
        take_away(server, "kill")
        Path(f"{base}.go").touch()
        wait_until(lambda: REFUSED_DELETE in worker.output(), 60, message="the completion during the outage")
        assert hooks_run(base) == ["start", "complete"]
        give_back(server, "kill")
        r = server.client()
        wait_until(lambda: not r.exists(f"it-{jid}"), 60, message="the state deleted once Redis is back")
        assert worker.stop(60) == 0
        assert items_run(base) == list(range(HOLD_AT + 20)) and hooks_run(base) == ["start", "complete"]
        assert queued(r) == []
        nothing_failed(r)
        assert worker.output().count(REFUSED_DELETE) == 1


def test_a_frozen_redis_pauses_the_walk_at_its_save_and_it_goes_on_when_thawed(tmp_path: Path) -> None:
    """A Redis that hangs (SIGSTOP: no error, no reply) holds the save's reply: the walk waits for it, as any
    command would, and goes on once Redis answers; nothing is refused, so nothing is logged about saves."""
    base = tmp_path / "walk"
    with own_redis(tmp_path) as (server, _config), run_worker(server) as worker:
        jid = held_walk(base, 1_000_000, 0.002)
        assert server.process is not None
        server.process.send_signal(signal.SIGSTOP)
        try:
            Path(f"{base}.go").touch()
            time.sleep(3.0)  # the freeze's length, not a wait for a result
            frozen_at = len(items_run(base))
        finally:
            server.process.send_signal(signal.SIGCONT)
        wait_until(lambda: (saved_cursor(server, jid) or 0) > frozen_at, 60, message="a save after the thaw")  # type: ignore[operator]
        assert frozen_at <= HOLD_AT + 2 + int(float(FLUSH) / 0.002)  # it stopped at its first save after the hold
        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0
        saved = state.read(server.client(), jid)
        assert saved is not None and items_run(base) == list(range(saved.cursor))
        assert REFUSED_SAVE not in worker.output()
