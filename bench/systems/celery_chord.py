"""Celery's side of the workflow benchmark (bench/workflow_cost.py): a chord of no-op members on Redis, with Redis
as the result backend too (a chord needs one; Celery joins a chord on Redis with a counter, no polling task).

Worker: ``celery -A bench.systems.celery_chord worker -P threads -c 10 -l WARNING``. Driver:
``python -m bench.systems.celery_chord MEMBERS TIMEOUT`` builds ``chord([member.s(i) ...])(body.s())`` and waits
for the body's result; prints ``{"seconds", "result", "version"}``, timed from before the chord is built to the
result in hand (the same span kiq's driver times).
"""

# mypy: disable-error-code="untyped-decorator,no-untyped-call,import-untyped"
# (the peers ship without type hints)

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version

from celery import Celery, chord

from bench.systems.common import redis_url

app = Celery("bench_chord", broker=redis_url(), backend=redis_url())
app.conf.broker_connection_retry_on_startup = True


@app.task(name="bench_chord_member")
def member(index: int) -> int:
    return index


@app.task(name="bench_chord_body")
def body(results: list[int]) -> int:
    return len(results)


def run(members: int, timeout: float) -> dict[str, object]:
    started = time.perf_counter()
    outcome = chord(member.s(index) for index in range(members))(body.s())
    result = outcome.get(timeout=timeout)
    return {"seconds": time.perf_counter() - started, "result": result, "version": version("celery")}


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]), float(sys.argv[2]))))
