"""``kiq.cancel`` where it cannot do what it says: a jid that never existed, a finished job, a job that is not
iterable (the mark stays, with the state's TTL, so nothing is left forever); and a cancel racing the walk's end in a
real worker: ``on_complete`` runs exactly once, ``on_cancel`` only when the cancel was seen before the last item, and
the job is neither retried nor dead."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

import kiq
from kiq.iteration import state
from kiq.keys import ITERATION_TTL
from tests.jobs.iteration_adversarial import QUEUE, FileWalk, PlainJob, hooks_run, items_run
from tests.support import ROOT, WorkerProcess, child_env, wait_until

StartWorker = Callable[..., WorkerProcess]
ARGS = ("-r", "tests.jobs.iteration_adversarial", "-q", QUEUE, "-c", "2")
EVERY_ITEM = {"KIQ_ITERATION_FLUSH_INTERVAL": "0"}  # a save (and a look at the cancel mark) before every item
COUNT = 20


def assert_mark_expires(r: redis.Redis, jid: str) -> None:
    assert r.hkeys(f"it-{jid}") == ["cancelled"]
    assert 0 < r.ttl(f"it-{jid}") <= ITERATION_TTL


def test_cancelling_a_jid_with_no_iterable_job_leaves_a_mark_that_expires(
    e2e_config: kiq.Config, start_worker: StartWorker, tmp_path: Path
) -> None:
    r = e2e_config.redis
    never = "f" * 24
    assert abs(kiq.cancel(never) - time.time()) < 60
    assert_mark_expires(r, never)
    for bad in ("", None, 42):
        with pytest.raises(ValueError, match=r"kiq\.cancel takes a job id"):
            kiq.cancel(bad)  # type: ignore[arg-type]

    finished = FileWalk.perform_async(3, 0.0, str(tmp_path / "finished"))
    plain = PlainJob.perform_async(str(tmp_path / "plain"))
    assert finished is not None and plain is not None
    kiq.cancel(plain)  # before it runs: a job that is not iterable ignores the mark
    worker = start_worker(*ARGS)
    wait_until(lambda: hooks_run(tmp_path / "finished") == ["start", "complete"], 60, message="the walk's end")
    wait_until(lambda: items_run(tmp_path / "plain") == [0], 60, message="the plain job run")
    kiq.cancel(finished)
    for jid in (finished, plain):
        assert_mark_expires(r, jid)
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert worker.stop(30) == 0

    answer = cli_cancel(e2e_config, "e" * 24)
    assert answer.returncode == 0 and "it has no iteration state yet" in answer.stdout, answer
    assert_mark_expires(r, "e" * 24)


def cli_cancel(config: kiq.Config, jid: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kiq.cli", "cancel", jid, "--redis-url", str(config.redis_url)],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_kiq_cancel_of_a_job_whose_state_another_producer_broke_cancels_it_and_says_so(e2e_config: kiq.Config) -> None:
    jid = "d" * 24
    e2e_config.redis.hset(f"it-{jid}", mapping={"ex": "1", "c": "{oops"})
    answer = cli_cancel(e2e_config, jid)
    assert answer.returncode == 0, answer
    assert "cancelled (its saved state could not be read" in answer.stdout and f"it-{jid}" in answer.stdout
    saved = state.read(e2e_config.redis, jid)  # readable now: a cancelled job needs no cursor
    assert saved is not None and saved.cancelled and saved.cursor is None


@pytest.mark.parametrize(
    ("held_item", "hooks", "items"),
    [
        # seen at the save before the last item: cancelled, the last item not run
        (COUNT - 2, ["start", "cancel", "complete"], list(range(COUNT - 1))),
        # during the last item: no save comes after it, so the walk completes (the mark goes with the state)
        (COUNT - 1, ["start", "complete"], list(range(COUNT))),
    ],
    ids=["before-the-last-item", "during-the-last-item"],
)
def test_a_cancel_racing_the_walks_end_completes_exactly_once(
    e2e_config: kiq.Config, start_worker: StartWorker, tmp_path: Path, held_item: int, hooks: list[str],
    items: list[int],
) -> None:  # fmt: skip
    r = e2e_config.redis
    base = tmp_path / "walk"
    jid = FileWalk.perform_async(COUNT, 0.0, str(base), held_item)
    assert jid is not None
    worker = start_worker(*ARGS, env=EVERY_ITEM)
    wait_until(lambda: Path(f"{base}.holding").exists(), 60, message="the walk at its held item")
    kiq.cancel(jid)
    Path(f"{base}.go").touch()
    wait_until(lambda: "complete" in hooks_run(base), 60, message="the walk's end")
    assert worker.stop(30) == 0
    assert hooks_run(base) == hooks and items_run(base) == items
    assert not r.exists(f"it-{jid}")
    assert r.llen(f"queue:{QUEUE}") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
