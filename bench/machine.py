"""What the results were measured on: printed with the table, stored in the JSON."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def _first_line(args: list[str]) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else "unavailable"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 0.0


def describe(kiq_python: str, peer_python: str, redis_version: str, yjit: bool) -> dict[str, str]:
    load = os.getloadavg()
    return {
        "cpu": f"{_cpu_model()}, {os.cpu_count()} cores",
        "memory": f"{_memory_gib():.1f} GiB",
        "os": f"{platform.system()} {platform.release()}",
        "python (kiq)": _first_line([kiq_python, "--version"]),
        "python (peers)": _first_line([peer_python, "--version"]),
        "ruby": _first_line(["ruby", "--version"]) + (" +YJIT" if yjit else ""),
        "redis-server": redis_version,
        "load average at start": f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
    }


def yjit_available() -> bool:
    try:
        done = subprocess.run(["ruby", "--yjit", "-e", "exit(RubyVM::YJIT.enabled? ? 0 : 1)"], capture_output=True)
    except OSError:
        return False
    return done.returncode == 0


def pinning(off: bool) -> tuple[set[int] | None, frozenset[int] | None]:
    """(redis-server's CPUs, the pushers' CPUs). On a small machine a push's round trip takes ~1.7x longer when the
    pusher and redis-server sit on different cores than on the same one, and the scheduler picks either from run to
    run: pinned apart, every pusher of every system crosses cores (as a client on another machine would). The
    workers are not pinned."""
    available = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if off or len(available) < 2:
        return None, None
    redis_cpu = max(available)
    return {redis_cpu}, frozenset(available - {redis_cpu})


def pinning_text(redis_cpus: set[int] | None, pusher_cpus: frozenset[int] | None) -> str:
    if not redis_cpus or not pusher_cpus:
        return "none"
    return (
        f"redis-server on CPU {', '.join(map(str, sorted(redis_cpus)))}, pushers on CPU "
        f"{', '.join(map(str, sorted(pusher_cpus)))}, workers unpinned"
    )
