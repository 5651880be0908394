"""Recording in bounded memory: each distinct stack is kept once and shared by its samples; past the recorder's
limit of frames, new stacks are recorded as one stand-in (their time still counted), so a deep recursion sampled
for long cannot grow the worker without bound."""

from __future__ import annotations

import pytest

from kiq.plugins.profiling import recorder
from kiq.plugins.profiling.recorder import OVER_LIMIT, BoundedProfiler


def descend(depth: int) -> int:
    """A recursion ``depth`` calls deep, with work at every level (each level a new, deeper stack)."""
    if depth == 0:
        return 0
    return sum(i * i for i in range(300)) + descend(depth - 1)


def test_samples_share_each_distinct_stack() -> None:
    profiler = BoundedProfiler(0.0001, "disabled")
    profiler.start()
    for _ in range(300):
        descend(3)
    session = profiler.stop()
    stacks = [stack for stack, _ in session.frame_records]
    assert len(stacks) > len(profiler.stacks)  # more samples than distinct stacks
    assert len({id(stack) for stack in stacks}) == len(profiler.stacks)  # one list per distinct stack
    assert not profiler.over_limit


def test_a_deep_recursion_past_the_limit_is_recorded_in_bounded_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorder, "MAX_FRAMES", 1_000)
    profiler = BoundedProfiler(0.001, "disabled")
    profiler.start()
    descend(800)  # stacks of 1 to 800 frames: 320,000 frames of distinct stacks
    session = profiler.stop()
    assert profiler.over_limit and profiler.frames <= 1_000
    assert [OVER_LIMIT] in [stack for stack, _ in session.frame_records]
    assert sum(seconds for _, seconds in session.frame_records) > 0
