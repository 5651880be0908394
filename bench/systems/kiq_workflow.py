"""kiq's side of the workflow benchmark (bench/workflow_cost.py): the jobs, and a driver that times one run.

Worker: ``kiq worker -r bench.systems.kiq_workflow -c 10`` with ``KIQ_PLUGINS=workflow``. Driver:
``python -m bench.systems.kiq_workflow MODE COUNT TIMEOUT`` prints ``{"seconds", "result", ...}``, timed from before
anything is built or pushed to the outcome in hand:

- ``chain``: a workflow chain of COUNT no-op steps (``.si()``), to its result;
- ``plain``: the same COUNT no-op jobs run one after the other without the plugin: each job pushes the next
  (``perform_async``) and the last one says so in a Redis list: a plain push-and-run per step;
- ``chord``: a chord of COUNT no-op members (each returns its index) and a body that gets their results (returns
  how many), to the body's result; ``push_seconds`` is the part spent building and pushing the workflow.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import kiq
from kiq.plugins.workflow import chain, chord, group

DONE_KEY = "bench:workflow:plain-done"  # the plain chain's last job RPUSHes here


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
        return len(results)


def run(mode: str, count: int, timeout: float) -> dict[str, Any]:
    started = time.perf_counter()
    if mode == "plain":
        BenchPlainStep.perform_async(count)
        done = kiq.default_config().redis.blpop([DONE_KEY], timeout=timeout)
        if done is None:
            raise SystemExit(f"the plain chain of {count} jobs did not finish in {timeout:g} s")
        return {"seconds": time.perf_counter() - started, "result": count}
    if mode == "chain":
        workflow = chain(*(BenchStep.si() for _ in range(count))).perform_async()
    elif mode == "chord":
        workflow = chord(group(BenchMember.s(index) for index in range(count)), BenchBody.s()).perform_async()
    else:
        raise SystemExit(f"unknown mode {mode!r}: chain, plain or chord")
    pushed = time.perf_counter()
    result = workflow.result(wait=timeout)
    return {"seconds": time.perf_counter() - started, "push_seconds": pushed - started, "result": result}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))))
