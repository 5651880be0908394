"""A pyinstrument recording as the Firefox Profiler's JSON: what a Sidekiq 8 Web UI's View button uploads to
profiler.firefox.com and its Data button serves.

The shape is the one Vernier (the Ruby profiler Sidekiq 8 runs) writes, lib/vernier/output/firefox.rb: a *processed*
profile of ``preprocessedProfileVersion`` 48 (the Firefox Profiler upgrades an older processed profile itself), one
thread with its string, function, frame and stack tables and one sample per pyinstrument record. A record stands for
the time since the previous one, so each sample carries that time as its weight (``weightType`` ``tracing-ms``):
the call tree and flame graph add up milliseconds, as pyinstrument's own views do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Record = tuple[list[str], float]  # pyinstrument's frame record: the stack (root first) and its seconds

PYTHON, WAITING = 0, 1  # categories: Python code, and time spent awaiting (pyinstrument's [await] frames)
CATEGORIES = [
    {"name": "Python", "color": "yellow", "subcategories": ["Other"]},
    {"name": "Waiting", "color": "grey", "subcategories": ["Other"]},
]


def frame_parts(frame_info: str) -> tuple[str, str, int | None, int | None]:
    """A pyinstrument frame string ``name\\0file\\0first line`` with ``\\1``-separated attributes (``l<line>`` the
    line running, ``c<class>`` the method's class) as (qualified name, file, first line, line running)."""
    identifier, *attributes = frame_info.split("\x01")
    name, _, rest = identifier.partition("\x00")
    file, _, first = rest.partition("\x00")
    line = None
    for attribute in attributes:
        if attribute.startswith("c") and len(attribute) > 1:
            name = f"{attribute[1:]}.{name}"
        elif attribute.startswith("l") and attribute[1:].isdigit():
            line = int(attribute[1:])
    return name, file, int(first) if first.isdigit() else None, line


class _Tables:
    """The thread's tables, each entry made once and named by its index."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {}
        self.funcs: dict[tuple[str, str, int | None], int] = {}
        self.func_rows: list[tuple[int, int, int | None, bool]] = []  # name, file, first line, waiting
        self.frames: dict[tuple[int, int | None], int] = {}
        self.frame_rows: list[tuple[int, int | None]] = []  # func, line
        self.stacks: dict[tuple[int | None, int], int] = {}
        self.stack_rows: list[tuple[int | None, int]] = []  # prefix, frame
        self.parsed: dict[str, int] = {}  # frame string -> frame index

    def string(self, text: str) -> int:
        return self.strings.setdefault(text, len(self.strings))

    def frame(self, frame_info: str) -> int:
        found = self.parsed.get(frame_info)
        if found is not None:
            return found
        name, file, first, line = frame_parts(frame_info)
        func_key = (name, file, first)
        func = self.funcs.get(func_key)
        if func is None:
            func = self.funcs[func_key] = len(self.func_rows)
            waiting = name in ("[await]", "[out-of-context]")
            self.func_rows.append((self.string(name), self.string(file), first, waiting))
        frame_key = (func, line)
        frame = self.frames.get(frame_key)
        if frame is None:
            frame = self.frames[frame_key] = len(self.frame_rows)
            self.frame_rows.append(frame_key)
        self.parsed[frame_info] = frame
        return frame

    def stack(self, frames: Sequence[str]) -> int | None:
        prefix: int | None = None
        for frame_info in frames:
            key = (prefix, self.frame(frame_info))
            stack = self.stacks.get(key)
            if stack is None:
                stack = self.stacks[key] = len(self.stack_rows)
                self.stack_rows.append(key)
            prefix = stack
        return prefix

    def category(self, frame: int) -> int:
        return WAITING if self.func_rows[self.frame_rows[frame][0]][3] else PYTHON


def firefox_profile(
    records: Sequence[Record], started_at: float, pid: int, tid: int, thread: str, meta: dict[str, str]
) -> dict[str, Any]:
    """The processed profile of ``records`` (a job run that started at epoch ``started_at`` in thread ``tid`` of
    process ``pid``); ``meta`` (the job's class, jid, token) is shown on the profile's information panel."""
    tables = _Tables()
    sample_stacks: list[int | None] = []
    times: list[float] = []
    weights: list[float] = []
    elapsed_ms = 0.0
    for stack, seconds in records:
        sample_stacks.append(tables.stack(stack))
        times.append(round(elapsed_ms, 3))
        weights.append(round(seconds * 1000, 3))
        elapsed_ms += seconds * 1000
    frames = len(tables.frame_rows)
    funcs = len(tables.func_rows)
    stacks = len(tables.stack_rows)
    stack_categories = [tables.category(frame) for _, frame in tables.stack_rows]
    thread_data = {
        "name": thread,
        "isMainThread": True,
        "processStartupTime": 0,
        "processShutdownTime": round(elapsed_ms, 3),
        "registerTime": 0,
        "unregisterTime": round(elapsed_ms, 3),
        "pausedRanges": [],
        "pid": pid,
        "tid": tid,
        "frameTable": {
            "address": [-1] * frames, "inlineDepth": [0] * frames,
            "category": [tables.category(index) for index in range(frames)], "subcategory": [0] * frames,
            "func": [func for func, _ in tables.frame_rows], "nativeSymbol": [None] * frames,
            "innerWindowID": [None] * frames, "implementation": [None] * frames,
            "line": [line for _, line in tables.frame_rows], "column": [None] * frames, "length": frames,
        },
        "funcTable": {
            "name": [row[0] for row in tables.func_rows], "isJS": [True] * funcs, "relevantForJS": [True] * funcs,
            "resource": [-1] * funcs, "fileName": [row[1] for row in tables.func_rows],
            "lineNumber": [row[2] for row in tables.func_rows], "columnNumber": [None] * funcs, "length": funcs,
        },
        "nativeSymbols": {},
        "samples": {
            "stack": sample_stacks, "time": times, "weight": weights, "weightType": "tracing-ms",
            "length": len(sample_stacks),
        },
        "stackTable": {
            "frame": [frame for _, frame in tables.stack_rows], "category": stack_categories,
            "subcategory": [0] * stacks, "prefix": [prefix for prefix, _ in tables.stack_rows], "length": stacks,
        },
        "resourceTable": {"length": 0, "lib": [], "name": [], "host": [], "type": []},
        "markers": {"data": [], "name": [], "startTime": [], "endTime": [], "phase": [], "category": [], "length": 0},
        "stringArray": list(tables.strings),
    }  # fmt: skip
    return {
        "meta": {
            "interval": 1,
            "startTime": started_at * 1000,
            "processType": 0,
            "product": "Python/kiq (pyinstrument)",
            "stackwalk": 1,
            "version": 28,
            "preprocessedProfileVersion": 48,
            "symbolicated": True,
            "markerSchema": [],
            "sampleUnits": {"time": "ms", "eventDelay": "ms", "threadCPUDelta": "µs"},
            "categories": CATEGORIES,
            "sourceCodeIsNotOnSearchfox": True,
            "initialVisibleThreads": [0],
            "initialSelectedThreads": [0],
            "extra": [
                {
                    "label": "Job",
                    "entries": [{"label": label, "format": "string", "value": value} for label, value in meta.items()],
                }
            ],
        },
        "counters": [],
        "libs": [],
        "threads": [thread_data],
    }
