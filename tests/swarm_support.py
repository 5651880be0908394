"""A swarm's children as the registry shows them, and a swarm as a chaos test's supply of victims: one ``kiq worker
-p N`` process start serves any number of kill -9s, as production's supervisor does (the swarm parent starts a new
child for each one killed: kiq.server.swarm)."""

from __future__ import annotations

import json
import os
import random
import re
import signal
from collections.abc import Callable
from typing import Any

import redis

import kiq
from tests.support import WorkerProcess, count_start, wait_until


def children(r: redis.Redis, parent: int) -> dict[int, dict[str, Any]]:
    """The registry's live processes forked by ``parent``: swarm index -> info (its ``pid``, ``identity``...; a killed
    child's entry stays in the registry until it expires, so only children whose pid is alive are listed)."""
    found = {}
    for identity in r.smembers(kiq.ext.keyspace(r).key("processes")):
        raw = r.hget(identity, "info")
        info = json.loads(raw) if raw else {}
        if info.get("swarm_parent") == parent and alive(info["pid"]):
            found[info["swarm_index"]] = info
    return found


def forked(pid: int) -> list[int]:
    """The pids of the children ``pid``'s main thread forked and has not reaped (Linux's /proc; a swarm's parent forks
    there), oldest first; a killed child is among them until reaped, unlike in the registry, where it stays a while."""
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        return [int(child) for child in children.read().split()]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a killed child stays a zombie until its parent reaps it (up to the swarm parent's poll,
    0.5 s), and its last heartbeat still shows it busy: that is not alive."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# with -p 1 a worker runs a swarm only under a memory limit (kiq.cli.worker): one no child reaches
NEVER_REACHED_MB = "1000000"


class VictimSwarm:
    """``kiq worker ARGS -p SIZE`` whose children a chaos test SIGKILLs. The parent starts a new child in place of
    each one killed, after 0.5 s for a child that lived 10 s, later (1 s doubling) for one killed young again and
    again (kiq.server.swarm). Its parent is forked from the test process (no interpreter to start: the swarm's
    memory is not these tests' subject). Each child it forks is a process start too: ``stop()`` counts them
    (STARTS_FILE, as "child"), beside the parent's own start."""

    def __init__(self, start: Callable[..., WorkerProcess], r: redis.Redis, size: int, *args: str, **env: str) -> None:
        self.r, self.size = r, size
        if size == 1:
            env.setdefault("KIQ_MAX_MEMORY_MB", NEVER_REACHED_MB)
        self.process = start(*args, "-p", str(size), env=env, fork=True)
        self.chaos = random.Random()

    def children(self) -> dict[int, dict[str, Any]]:
        return children(self.r, self.process.pid)

    def ready(self, count: int | None = None, timeout: float = 30) -> dict[int, dict[str, Any]]:
        """Once ``count`` children (all, by default) are registered and alive: them."""
        want = self.size if count is None else count

        def found() -> dict[int, dict[str, Any]]:
            live = self.children()
            return live if len(live) >= want else {}

        return wait_until(found, timeout, message=f"{want} swarm children")

    def kill(
        self,
        until: Callable[[dict[str, Any]], object] | None = None,
        among: Callable[[dict[str, Any]], object] | None = None,
    ) -> dict[str, Any]:
        """SIGKILL a live child, chosen at random among those for which ``among(info)`` holds (waited for: e.g.
        ``busy`` when the test's work is one job, which one child runs), once ``until(info)`` holds for it (e.g. it
        is running jobs: the chosen child is waited for, not swapped); its info, once it is dead."""

        def candidates() -> dict[int, dict[str, Any]]:
            return {index: info for index, info in self.children().items() if among is None or among(info)}

        found = wait_until(candidates, 30, message="a swarm child to choose for the kill")
        victim = found[self.chaos.choice(sorted(found))]
        if until is not None:
            wait_until(lambda: until(victim), 30, message=f"swarm child {victim['pid']} to be ready for its kill")
        os.kill(victim["pid"], signal.SIGKILL)
        wait_until(lambda: not alive(victim["pid"]), 10, message=f"swarm child {victim['pid']} to die")
        return victim

    def busy(self, info: dict[str, Any]) -> bool:
        """Whether the child is running a job, as its last heartbeat said."""
        return int(self.r.hget(info["identity"], "busy") or 0) > 0

    def deaths(self) -> int:
        """The children the parent saw die of anything but a stop (it restarts each, unless it is stopping by then)."""
        return len(re.findall(r"swarm child \d+ \(pid \d+\) exited with .* restarting in", self.output()))

    def exits(self) -> dict[int, int]:
        """Each child that exited: pid -> exit status, from the parent's log (a stop's and a death's lines alike)."""
        found = re.findall(r"swarm child \d+ \(pid (\d+)\) exited with (-?\d+)", self.output())
        return {int(pid): int(code) for pid, code in found}

    def output(self) -> str:
        return self.process.output()

    def stop(self, timeout: float = 40) -> int:
        """TERM the swarm (its children stop gracefully); its exit status. Counts the children it started."""
        code = self.process.stop(timeout)
        for _ in self.exits():  # every child started exits, and the parent logs it
            count_start("child")
        return code
