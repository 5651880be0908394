"""A live resharding of a loopback cluster (tests/cluster_support.py) for the resharding tests: a slot moved to
another primary key by key with ``MIGRATE``, as ``redis-cli --cluster reshard`` (and a managed service scaling
out) moves it, while the test's clients and workers keep using it.

While a slot migrates, its keys are split between two primaries: the source answers a command whose keys it still
has, redirects one whose keys have all left (``ASK``), and refuses one whose keys are split (``TRYAGAIN``); inside
a Lua script, a command on a key the source no longer has fails the script where it stands ("Script attempted to
access a non local key"), after the writes it already made. ``SlotMover`` keeps slots in that state most of the
time: it moves them back and forth, one key at a time, with a pause between keys."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from redis.crc import key_slot

from tests.cluster_support import HOST, LoopbackCluster, Node

MIGRATE_TIMEOUT_MS = 5000


def owner_of(cluster: LoopbackCluster, slot: int) -> Node:
    """The primary that serves ``slot`` (as the first live node says: call it while the slot is stable)."""
    view = cluster.view(cluster.live_nodes()[0])
    for node_id, (role, _, slots) in view.items():
        if role != "primary":
            continue
        for item in slots.split():
            first, _, last = item.partition("-")
            if not item.startswith("[") and int(first) <= slot <= int(last or first):
                return cluster.by_id(node_id)
    raise AssertionError(f"no primary serves slot {slot}")


def slot_of(key: str) -> int:
    return int(key_slot(key.encode()))


def migrate_slot(cluster: LoopbackCluster, slot: int, target: Node, pause: float, stop: threading.Event) -> int:
    """Move ``slot`` to ``target`` one key at a time (``pause`` seconds after each key); returns the keys moved.
    The slot is in the migrating state from the first key to the last, then given to ``target`` on every primary.
    ``stop`` only shortens the pauses: a started migration always finishes (the cluster stays whole)."""
    source = owner_of(cluster, slot)
    if source.id == target.id:
        return 0
    target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.id)
    source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.id)
    moved = 0
    client = source.client()
    try:
        while True:
            keys = client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1)
            if not keys:
                break
            client.execute_command("MIGRATE", HOST, target.port, "", 0, MIGRATE_TIMEOUT_MS, "KEYS", *keys)
            moved += 1
            if not stop.is_set():
                time.sleep(pause)
        # the slot's new owner first, then the old one (which stops redirecting with ASK), then the others
        for node in [target, source, *(p for p in cluster.primaries() if p.id not in (target.id, source.id))]:
            node.command("CLUSTER", "SETSLOT", slot, "NODE", target.id)
    finally:
        client.close()
    return moved


@dataclass
class SlotMover:
    """A thread moving ``slots`` between their owner and another primary, back and forth, key by key, until
    ``stop()``, which ends the migration under way and moves every slot back home."""

    cluster: LoopbackCluster
    slots: list[int]
    pause: float = 0.01  # seconds between two keys: the slot stays migrating most of the time
    rest: float = 0.05  # seconds between two migrations (the slot stable)
    migrations: int = 0
    keys_moved: int = 0
    failure: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _homes: dict[int, Node] = field(default_factory=dict)

    def start(self) -> SlotMover:
        self._homes = {slot: owner_of(self.cluster, slot) for slot in self.slots}
        self._thread = threading.Thread(target=self._run, name="slot-mover", daemon=True)
        self._thread.start()
        return self

    def _away(self, slot: int) -> Node:
        home = self._homes[slot]
        return next(node for node in self.cluster.primaries() if node.id != home.id)

    def _run(self) -> None:
        try:
            away = {slot: self._away(slot) for slot in self.slots}
            while not self._stop.is_set():
                for slot in self.slots:
                    current = owner_of(self.cluster, slot)
                    target = away[slot] if current.id == self._homes[slot].id else self._homes[slot]
                    self.keys_moved += migrate_slot(self.cluster, slot, target, self.pause, self._stop)
                    self.migrations += 1
                self._stop.wait(self.rest)
            for slot in self.slots:  # home again: the next test finds the cluster as the pool started it
                migrate_slot(self.cluster, slot, self._homes[slot], 0.0, self._stop)
        except BaseException as exc:
            self.failure = exc

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
            assert not self._thread.is_alive(), "the slot migration did not end"
        if self.failure is not None:
            raise AssertionError(f"the slot migration failed: {self.failure!r}") from self.failure


def whereabouts(r: Any, jids: set[str]) -> str:
    """Where the jobs of ``jids`` are in the cluster (which key of which type), or nowhere: for a failure message."""
    found: dict[str, list[str]] = {jid: [] for jid in jids}
    for key in r.scan_iter():
        kind = r.type(key)
        values = r.lrange(key, 0, -1) if kind == "list" else r.zrange(key, 0, -1) if kind == "zset" else []
        for value in values:
            for jid in jids:
                if jid in value:
                    found[jid].append(f"{key} ({kind})")
    shown = sorted(found.items())[:20]
    return f"{len(jids)} jobs did not run: " + "; ".join(f"{jid} in {keys or 'no key'}" for jid, keys in shown)
