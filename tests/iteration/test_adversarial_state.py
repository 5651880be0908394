"""Iteration state that another producer wrote (a Ruby app, a hand edit) with wrong types, and cursors a job yields
that cannot be saved, met by one real ``kiq worker``: each job ends with a clear error (dead, with a message naming
the hash, the field and the fix) or is read tolerantly as Sidekiq reads it (a number field that is not a finite
number is 0; any ``cancelled`` value means cancelled); the worker runs on and a sound job beside them completes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.iteration import state
from tests.jobs.iteration_adversarial import QUEUE, BadCursor, FileWalk, hooks_run, items_run
from tests.support import WorkerProcess, raw_redis, wait_until

COUNT = 8
NOT_JSON = "holds a cursor that is not JSON"

# name -> (the fields written to it-<jid> before the job runs, with bytes as the raw value)
CORRUPT: dict[str, dict[str, bytes]] = {
    "c-not-json": {"ex": b"1", "c": b"{oops"},
    "c-nul": {"ex": b"1", "c": b"3\x00"},
    "c-not-utf8": {"ex": b"1", "c": b"\xff\xfe"},
    "c-wrong-shape": {"ex": b"1", "c": b'{"id": 5}'},
    "c-lone-surrogate": {"ex": b"1", "c": b'"\\ud800"'},
    "ex-garbage": {"ex": b"abc", "c": b"3"},
    "rt-nan": {"ex": b"2", "c": b"2", "rt": b"NaN"},
    "rt-inf": {"ex": b"2", "c": b"2", "rt": b"inf"},
    "cancelled-garbage": {"ex": b"1", "c": b"1", "cancelled": b"garbage\xff"},
    "cancelled-c-not-json": {"ex": b"1", "c": b"{oops", "cancelled": b"1795600000"},
}
DEAD = {"c-not-json", "c-nul", "c-not-utf8", "c-wrong-shape", "c-lone-surrogate"}


def dead_by_jid(r: redis.Redis) -> dict[str, dict[str, Any]]:
    return {job["jid"]: job for job in (kiq.ext.loads(raw) for raw in r.zrange("dead", 0, -1))}


def test_corrupt_state_and_unsavable_cursors_end_clearly_and_the_worker_runs_on(
    e2e_config: kiq.Config, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    r = e2e_config.redis
    raw = raw_redis(e2e_config)
    jids: dict[str, str] = {}
    for name, fields in CORRUPT.items():
        jid = FileWalk.set(retry=0).perform_async(COUNT, 0.0, str(tmp_path / name))
        assert jid is not None
        raw.hset(f"it-{jid}", mapping=fields)  # type: ignore[arg-type]
        jids[name] = jid
    bad_cursors = {bad: BadCursor.set(retry=0).perform_async(3, bad) for bad in ("set", "nan", "datetime", "bytes")}
    FileWalk.perform_async(COUNT, 0.0, str(tmp_path / "sound"))
    worker = start_worker("-r", "tests.jobs.iteration_adversarial", "-q", QUEUE, "-c", "2")

    wait_until(lambda: hooks_run(tmp_path / "sound") == ["start", "complete"], 60, message="the sound job's end")
    wait_until(lambda: r.zcard("dead") == len(DEAD) + len(bad_cursors), 60, message="the dead jobs")
    wait_until(lambda: r.llen(f"queue:{QUEUE}") == 0 and not busy(r), 30, message="every job done")
    assert items_run(tmp_path / "sound") == list(range(COUNT))
    dead = dead_by_jid(r)

    for name in ("c-not-json", "c-nul", "c-not-utf8"):
        message = dead[jids[name]]["error_message"]
        assert f"it-{jids[name]}" in message and NOT_JSON in message and "delete the hash" in message, message
        assert raw.hget(f"it-{jids[name]}", "c") == CORRUPT[name]["c"]  # left as it was, for someone to look at
    for name in ("c-wrong-shape", "c-lone-surrogate"):  # the enumerator's own error, with a note in the log
        assert dead[jids[name]]["error_class"] == "TypeError"
        assert f"saved in it-{jids[name]} (field c)" in worker.output()
    # tolerant readings, as Sidekiq's: what is not a finite number is 0; any cancelled value means cancelled
    assert hooks_run(tmp_path / "ex-garbage") == ["start", "complete"]  # ex read as 0: a first run
    assert items_run(tmp_path / "ex-garbage") == list(range(3, COUNT))
    for name in ("rt-nan", "rt-inf"):
        assert hooks_run(tmp_path / name) == ["resume:2", "complete"]
        assert items_run(tmp_path / name) == list(range(2, COUNT))
    assert hooks_run(tmp_path / "cancelled-garbage") == ["resume:1", "cancel", "complete"]  # Sidekiq's order
    assert items_run(tmp_path / "cancelled-garbage") == []
    # cancelled: it does not walk, so a cursor that is not JSON does not matter
    assert hooks_run(tmp_path / "cancelled-c-not-json") == ["resume:None", "cancel", "complete"]
    for name in ("ex-garbage", "rt-nan", "rt-inf", "cancelled-garbage", "cancelled-c-not-json"):
        assert not r.exists(f"it-{jids[name]}") and jids[name] not in dead

    for bad, jid in bad_cursors.items():
        message = dead[jid]["error_message"]
        assert f"BadCursor jid={jid}" in message and "must be JSON-native" in message, message
        saved = state.read(r, jid)
        assert saved is not None and saved.cursor == 2, bad  # the last cursor that could be saved
    assert worker.stop(30) == 0


def busy(r: redis.Redis) -> int:
    return sum(r.hlen(f"{identity}:work") for identity in r.smembers("processes"))


@pytest.mark.parametrize("cursor", ["\ud800", ["a\udfff", {"k": "\udc80"}]])
def test_a_cursor_with_lone_surrogates_is_saved_with_escapes_and_read_back(
    e2e_config: kiq.Config, cursor: object
) -> None:
    r = e2e_config.redis
    state.flush(r, "0" * 24, 1, cursor, 0.5)
    saved = state.read(r, "0" * 24)
    assert saved is not None and saved.cursor == cursor
    assert raw_redis(e2e_config).hget(f"it-{'0' * 24}", "c").isascii()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "expected"), [("NaN", 0.0), ("inf", 0.0), ("-inf", 0.0), ("1e400", 0.0), ("2.5", 2.5)]
)
def test_runtime_that_is_not_a_finite_number_reads_as_0(e2e_config: kiq.Config, text: str, expected: float) -> None:
    e2e_config.redis.hset(f"it-{'1' * 24}", mapping={"ex": "1", "c": "null", "rt": text})
    saved = state.read(e2e_config.redis, "1" * 24)
    assert saved is not None and saved.runtime == expected


def test_a_key_of_another_type_under_the_states_name_is_a_clear_error(e2e_config: kiq.Config) -> None:
    jid = "2" * 24
    e2e_config.redis.set(f"it-{jid}", "someone else's")
    with pytest.raises(ValueError, match=rf"it-{jid} is not a hash .*WRONGTYPE.*rename or delete it"):
        state.read(e2e_config.redis, jid)
