"""kiq's side of the workflow benchmark (bench/workflow_cost.py): the jobs, and a driver that times one run.

Worker: ``kiq worker -r bench.systems.kiq_workflow -c 10`` with ``KIQ_PLUGINS=workflow``. Driver:
``python -m bench.systems.kiq_workflow MODE COUNT TIMEOUT`` prints ``{"seconds", "result", ...}``, timed from before
anything is built or pushed until the last job has run: it says so in a Redis list (``DONE_KEY``) the driver
blocks on, as Celery's body does (bench/systems/celery_chord.py), so neither side's result API (kiq's
``result(wait=)`` polls, Celery's ``get`` subscribes) is timed; the result is then read through the API and checked:

- ``plain``: COUNT no-op jobs run one after the other without the plugin: each job pushes the next
  (``perform_async``): a plain push-and-run per step;
- ``chain``: a workflow chain of the same COUNT steps (``.si()``: COUNT - 1 no-op steps, then the same last job);
- ``chord``: a chord of COUNT no-op members (each returns its index) and a body that gets their results (returns
  how many); ``push_seconds`` is the part spent building and pushing the workflow.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import kiq
from kiq.plugins.workflow import chain, chord, group

DONE_KEY = "bench:workflow:done"  # the last job of a run RPUSHes here


class BenchStep(kiq.Job):
    kiq_name = "BenchWorkflowStep"

    def perform(self) -> None:
        pass


class BenchPlainStep(kiq.Job):
    kiq_name = "BenchPlainStep"

    def perform(self, left: int) -> None:
        if left > 1:
            BenchPlainStep.perform_async(left - 1)
        else:
            kiq.default_config().redis.rpush(DONE_KEY, 1)


class BenchMember(kiq.Job):
    kiq_name = "BenchChordMember"

    def perform(self, index: int) -> int:
        return index


class BenchBody(kiq.Job):
    kiq_name = "BenchChordBody"

    def perform(self, results: list[int]) -> int:
        kiq.default_config().redis.rpush(DONE_KEY, len(results))
        return len(results)


def run(mode: str, count: int, timeout: float) -> dict[str, Any]:
    redis = kiq.default_config().redis
    started = time.perf_counter()
    workflow = None
    if mode == "plain":
        BenchPlainStep.perform_async(count)
    elif mode == "chain":
        workflow = chain(*(BenchStep.si() for _ in range(count - 1)), BenchPlainStep.si(1)).perform_async()
    elif mode == "chord":
        workflow = chord(group(BenchMember.s(index) for index in range(count)), BenchBody.s()).perform_async()
    else:
        raise SystemExit(f"unknown mode {mode!r}: plain, chain or chord")
    pushed = time.perf_counter()
    done = redis.blpop([DONE_KEY], timeout=timeout)
    finished = time.perf_counter()
    if done is None:
        raise SystemExit(f"{mode} of {count}: its last job did not run in {timeout:g} s")
    result = count if workflow is None else workflow.result(wait=timeout)
    return {"seconds": finished - started, "push_seconds": pushed - started, "result": result}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))))
