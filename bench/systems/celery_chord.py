"""Celery's side of the workflow benchmark (bench/workflow_cost.py): a chord of no-op members on Redis, with Redis
as the result backend too (a chord needs one; Celery joins a chord on Redis with a counter, no polling task).

Worker: ``celery -A bench.systems.celery_chord worker -P threads -c 10 -l WARNING``. Driver:
``python -m bench.systems.celery_chord MEMBERS TIMEOUT`` builds ``chord([member.s(i) ...])(body.s())`` and waits
until the body has run (it says so in a Redis list, as kiq's body does: bench/systems/kiq_workflow.py), then reads
the body's result (``get``) and prints ``{"seconds", "result", "version"}``, timed from before the chord is built
to the body's run (the span kiq's driver times).
"""

# mypy: disable-error-code="untyped-decorator,no-untyped-call,import-untyped"
# (the peers ship without type hints)

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version

import redis
from celery import Celery, chord

from bench.systems.common import redis_url

DONE_KEY = "bench:workflow:done"  # the body RPUSHes here
app = Celery("bench_chord", broker=redis_url(), backend=redis_url())
_redis = redis.Redis.from_url(redis_url())
app.conf.broker_connection_retry_on_startup = True


@app.task(name="bench_chord_member")
def member(index: int) -> int:
    return index


@app.task(name="bench_chord_body")
def body(results: list[int]) -> int:
    _redis.rpush(DONE_KEY, len(results))
    return len(results)


def run(members: int, timeout: float) -> dict[str, object]:
    started = time.perf_counter()
    outcome = chord(member.s(index) for index in range(members))(body.s())
    if _redis.blpop([DONE_KEY], timeout=timeout) is None:
        raise SystemExit(f"the chord of {members} did not run its body in {timeout:g} s")
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "result": outcome.get(timeout=timeout), "version": version("celery")}


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]), float(sys.argv[2]))))
