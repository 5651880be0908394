"""Recording one job run with pyinstrument, in bounded memory.

pyinstrument keeps every sample's whole stack as a new list of new strings: a deep stack (a recursion 5,000 calls
deep) sampled every millisecond grows by megabytes a second. The recorder keeps one copy of each distinct stack and
refers to it from every sample of it, up to ``MAX_FRAMES`` frames of distinct stacks; a stack seen after that is
recorded as ``OVER_LIMIT`` (the time still counts), and the profile says so.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pyinstrument import Profiler
from pyinstrument.frame_info import frame_info_get_identifier
from pyinstrument.session import Session

from .firefox import Record

INTERVAL = 0.001  # seconds between samples, pyinstrument's default
MAX_FRAMES = 2_000_000  # frames of distinct stacks kept while recording (a 4,900-deep recursion peaked at 233 MB)
OVER_LIMIT = "[stacks past the recording limit]\x00\x000"
OVER_LIMIT_NOTE = f"stacks first seen past {MAX_FRAMES} recorded frames counted as [stacks past the recording limit]"


class BoundedProfiler(Profiler):
    """A pyinstrument ``Profiler`` whose samples share one copy of each distinct stack, ``MAX_FRAMES`` at most."""

    def __init__(self, interval: float, async_mode: Any) -> None:
        super().__init__(interval=interval, async_mode=async_mode)
        self.stacks: dict[tuple[str, ...], list[str]] = {}
        self.frames = 0
        self.over_limit = False

    def _sampler_saw_call_stack(self, call_stack: list[str], time_since_last_sample: float, async_state: Any) -> None:
        key = tuple(call_stack)
        kept = self.stacks.get(key)
        if kept is None:
            if self.frames + len(key) > MAX_FRAMES:
                self.over_limit = True
                kept = [OVER_LIMIT]
            else:
                kept = self.stacks[key] = call_stack
                self.frames += len(key)
        super()._sampler_saw_call_stack(kept, time_since_last_sample, async_state)


def started(frame: Any, title: str) -> BoundedProfiler | None:
    """A profiler started for the job about to run here (its stacks trimmed later to below ``frame``'s caller, the
    chain's), or None when one already runs in this thread or task (pyinstrument allows one)."""
    try:
        asyncio.get_running_loop()
        in_loop = True
    except RuntimeError:
        in_loop = False
    profiler = BoundedProfiler(INTERVAL, "enabled" if in_loop else "disabled")
    try:
        profiler.start(caller_frame=frame.f_back if frame is not None else None, target_description=title)
    except (RuntimeError, ValueError):
        return None
    return profiler


def trimmed(session: Session) -> list[Record]:
    """The session's stacks without the frames of the worker around the job (those it shares with where the
    profiler started): a stack then starts at the chain's call of ``perform``."""
    start = [frame_info_get_identifier(frame) for frame in session.start_call_stack]
    out: list[Record] = []
    for stack, seconds in session.frame_records:
        shared = 0
        for frame, outer in zip(stack, start, strict=False):
            if frame_info_get_identifier(frame) != outer:
                break
            shared += 1
        out.append((stack[shared:] or stack[-1:], seconds))
    return out
