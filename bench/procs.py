"""Process-tree memory from /proc (Linux): a worker's RSS is its own plus its children's (Dramatiq forks)."""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def _parent(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state; comm may contain spaces


def tree(root: int) -> list[int]:
    """``root`` and all its descendants alive now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir(PROC):
        if entry.isdigit():
            parent = _parent(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return found


def status_value(pid: int, field: str) -> int:
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_kib(root: int) -> int:
    """Resident memory of the tree now."""
    return sum(status_value(pid, "VmRSS") for pid in tree(root))


def peak_rss_kib(root: int) -> int:
    """The sum of each live process's own peak (VmHWM): an upper bound of the tree's peak."""
    return sum(status_value(pid, "VmHWM") for pid in tree(root))


def context_switches(root: int) -> int:
    """Voluntary and involuntary context switches of every thread of ``root``'s process tree so far: a thread woken
    (to fetch, to take over a wait) shows as one more switch."""
    total = 0
    for pid in tree(root):
        try:
            tasks = os.listdir(PROC / str(pid) / "task")
        except OSError:
            continue
        for task in tasks:
            total += status_value(int(task), "voluntary_ctxt_switches")
            total += status_value(int(task), "nonvoluntary_ctxt_switches")
    return total


def cpu_seconds(root: int) -> float:
    """User + system CPU time of ``root``'s process tree (its live processes) from /proc, in seconds."""
    ticks = 0
    for pid in tree(root):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after comm, which may hold spaces: state is fields[0]
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (the 14th and 15th of the whole line)
    return ticks / os.sysconf("SC_CLK_TCK")
