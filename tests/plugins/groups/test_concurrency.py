"""Per-group concurrency over every worker: a limit of 2 holds across two workers of 10 threads while 8 jobs run at
once, and a new limit or a pause reaches running workers within a second."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest

import kiq
from tests.jobs.groups import SPANS, STARTS, Sleeps
from tests.support import InProcessWorker, wait_until

StartWorker = Callable[..., InProcessWorker]
WORKER = ("-r", "tests.jobs.groups", "-c", "10")
GROUPS = ("g1", "g2", "g3", "g4")


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of spans that overlap at one instant (an end at the instant another starts: no overlap)."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def spans_of(r: object) -> dict[str | None, list[tuple[float, float]]]:
    spans: dict[str | None, list[tuple[float, float]]] = {}
    for group, start, end, _ in map(json.loads, r.lrange(SPANS, 0, -1)):  # type: ignore[attr-defined]
        spans.setdefault(group, []).append((start, end))
    return spans


@pytest.mark.cluster
def test_a_limit_of_2_holds_over_two_workers_of_10_threads(e2e_config: kiq.Config, start_worker: StartWorker) -> None:
    e2e_config.add_plugin("groups")
    r = e2e_config.redis
    for group in GROUPS:
        Sleeps.set(group=group).perform_bulk([[50]] * 50)
    handles = [kiq.Queue("default").group(group) for group in GROUPS]
    samples: list[list[int]] = []
    done = threading.Event()

    def sample() -> None:  # the slots in use of each group, every 5 ms
        while not done.is_set():
            samples.append([handle.running for handle in handles])
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    env = {"KIQ_PLUGINS": "groups", "KIQ_GROUP_CONCURRENCY": "2"}
    workers = [start_worker(*WORKER, env=env) for _ in range(2)]
    wait_until(lambda: r.llen(SPANS) == 200, 60, interval=0.1, message="all 200 jobs")
    done.set()
    sampler.join()
    for worker in workers:
        assert worker.stop() == 0, worker.output()
    spans = spans_of(r)
    per_group = {group: most_at_once(spans[group]) for group in GROUPS}
    overall = most_at_once([span for group in GROUPS for span in spans[group]])
    print(f"\nat most at once: {per_group}, overall {overall}; {len(samples)} samples, max {max(map(max, samples))}")
    assert all(peak <= 2 for peak in per_group.values())
    assert max(max(sample) for sample in samples) <= 2
    assert overall >= 6
    assert all(handle.running == 0 for handle in handles)  # every slot back


def test_a_new_limit_and_a_pause_reach_running_workers_within_a_second(
    e2e_config: kiq.Config, start_worker: StartWorker
) -> None:
    e2e_config.add_plugin("groups")
    r = e2e_config.redis
    Sleeps.set(group="wide").perform_bulk([[100]] * 400)
    Sleeps.set(group="held").perform_bulk([[20, "held"]] * 400)
    wide = kiq.Queue("default").group("wide")
    held = kiq.Queue("default").group("held")
    worker = start_worker(*WORKER, env={"KIQ_PLUGINS": "groups", "KIQ_GROUP_CONCURRENCY": "1"})
    wait_until(lambda: wide.running == 1, message="the wide group under way")
    changed = time.monotonic()
    wide.concurrency = 5
    wait_until(lambda: wide.running == 5, 5, interval=0.01, message="5 of the wide group at once")
    widened = time.monotonic() - changed
    assert wide.concurrency == 5
    held.pause()
    paused_at = time.time()
    assert held.paused
    time.sleep(1.0)
    late = [at for group, label, at in map(json.loads, r.lrange(STARTS, 0, -1)) if label == "held" and at > paused_at]
    size = held.size
    time.sleep(0.5)
    assert held.size == size  # nothing more taken
    held.unpause()
    wait_until(lambda: held.size < size, 5, message="the unpaused group to go on")
    wide.concurrency = None
    assert wide.concurrency is None
    worker.stop()
    print(f"\nlimit 1 -> 5 seen in {widened:.3f} s; held jobs started after the pause: {len(late)}")
    assert widened < 1.0
    assert len(late) <= 1  # at most the one fetched before the pause
