"""Round trips of many commands (``run_pipeline``: the pushes' path) and the state kept per connection pool
(``PerPool``): a shelved idle connection per pool, and the count of master changes a dedicated connection checks."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import redis
from redis.connection import Connection
from redis.utils import HIREDIS_AVAILABLE

if HIREDIS_AVAILABLE:
    import hiredis

from .redis import is_cluster

T = TypeVar("T")


def run_pipeline(client: redis.Redis, commands: Sequence[Sequence[Any]], raise_on_error: bool = True) -> list[Any]:
    """``commands`` in one round trip, their replies in order: what ``pipeline(transaction=False)`` does, at half
    its cost per call (the pushes' path; docs/performance.md, "Round 2"). One idle connection per pool waits on a shelf
    between calls, so a call skips the pool's checkout and the pipeline's wrappers but keeps its check (a connection
    the server closed — a timeout, a proxy, a restart, a failover — reconnects). Only these calls use a shelved
    connection and any failure disconnects it, so no reply is ever left unread on it; a broken one is retried as the
    client's ``retry`` says, as redis-py's pipeline does. An error reply is raised once every reply has been read
    (``raise_on_error=False``: left in its place among the replies, as redis-py's ``execute(raise_on_error=False)``).
    On a cluster: its pipeline, which sends each node its commands."""
    if is_cluster(client):
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        return pipe.execute(raise_on_error=raise_on_error)
    pool = client.connection_pool
    shelf = _shelves.get(pool)
    masters = master_changes.get(pool)
    followed = masters[0]
    try:
        connection = shelf.pop()
    except IndexError:
        connection = pool.get_connection()
    else:
        _drop_if_stale(connection)
    try:
        replies: list[Any] = connection.retry.call_with_retry(
            lambda: _round_trip(connection, commands, raise_on_error),
            lambda error: connection.disconnect(),  # type: ignore[no-untyped-call]
        )
    except redis.ResponseError:
        _put_back(pool, shelf, connection, masters[0] != followed)  # every reply was read: the connection is clean
        raise
    except BaseException:
        connection.disconnect()  # type: ignore[no-untyped-call]  # a reply may be half read
        pool.release(connection)
        raise
    _put_back(pool, shelf, connection, masters[0] != followed)
    return replies


class PerPool(Generic[T]):
    """A value per connection pool, made on first use in each process (a child after a fork starts afresh, as the
    pool itself does). Looked up by the pool's id in ~0.1 µs: a WeakKeyDictionary builds a weak reference on every
    lookup, and these are on the path of every push."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._values: dict[int, tuple[weakref.ref[Any], int, T]] = {}

    def get(self, pool: Any) -> T:
        entry = self._values.get(id(pool))
        if entry is None or entry[1] != _pid or entry[0]() is not pool:
            with _lock:
                entry = self._values.get(id(pool))
                if entry is None or entry[1] != _pid or entry[0]() is not pool:
                    entry = self._values[id(pool)] = (weakref.ref(pool, self._forget(id(pool))), _pid, self._make())
        return entry[2]

    def values(self) -> list[T]:
        return [entry[2] for entry in list(self._values.values())]

    def _forget(self, key: int) -> Callable[[weakref.ref[Any]], None]:
        def forget(gone: weakref.ref[Any]) -> None:  # the pool was collected; its id may already be another's
            entry = self._values.get(key)
            if entry is not None and entry[0] is gone:
                del self._values[key]

        return forget


_pid = os.getpid()
_lock = threading.Lock()  # making a PerPool value, and putting a connection on a shelf (never two idle on one)


def _after_fork() -> None:
    global _pid, _lock
    _pid, _lock = os.getpid(), threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
Shelf = list[Connection]  # at most one idle connection
_shelves: PerPool[Shelf] = PerPool(list)


# per pool, how many times follow_new_master was called: a dedicated connection taken before the last call is dropped
master_changes: PerPool[list[int]] = PerPool(lambda: [0])


def master_generation(client: redis.Redis) -> int:
    """How many times this process moved ``client``'s connections to a new master (``follow_new_master``: a worker on
    Sentinel with ``push_replicas``, as soon as the Sentinels name one; 0 on a cluster). A plugin that keeps a
    connection of the client's pool across calls compares this with its value when it took the connection, and
    drops the connection once it grew: redis-py would go on sending its commands to the old master."""
    if is_cluster(client):
        return 0
    return master_changes.get(client.connection_pool)[0]


def follow_new_master(client: redis.Redis) -> None:
    """The Sentinels name a new master (a worker's heartbeat noticed): drop every connection of ``client``'s pool to
    the old one: the idle ones (redis-py does it when it learns the new address), the shelved one of
    ``run_pipeline`` (and one a call is using, when it ends), the dedicated ones (the fetchers') at their next
    command, and those a plugin keeps, which ``master_generation`` tells it to drop. After a forced failover the old
    master takes writes for seconds, until the Sentinels demote it and it discards them; a worker that went on
    fetching from it would run every job it took there again. A connection in use is not cut under its user (a
    command may be under way): its user drops it, as said; connecting again asks the Sentinels (kiq.sentinel)."""
    pool = client.connection_pool
    pool.disconnect(inuse_connections=False)
    master_changes.get(pool)[0] += 1
    shelf = _shelves.get(pool)
    with _lock:
        shelved, shelf[:] = shelf[:], []
    for connection in shelved:
        connection.disconnect()  # type: ignore[no-untyped-call]
        pool.release(connection)


def _put_back(pool: Any, shelf: Shelf, connection: Connection, master_changed: bool) -> None:
    if master_changed:  # in use when follow_new_master emptied the shelf: it may talk to the old master
        connection.disconnect()  # type: ignore[no-untyped-call]
        pool.release(connection)
        return
    with _lock:
        if not shelf:
            shelf.append(connection)
            return
    pool.release(connection)  # one idle connection is kept; the others go back to the pool, which others wait on


def _drop_if_stale(connection: Connection) -> None:
    """What the pool checks on a checkout: a connection with unread data (or closed by the server) starts over."""
    try:
        stale = connection.can_read()
    except (redis.ConnectionError, OSError):
        stale = True
    if stale:
        connection.disconnect()  # type: ignore[no-untyped-call]  # the next send connects again


def _round_trip(connection: Connection, commands: Sequence[Sequence[Any]], raise_on_error: bool = True) -> list[Any]:
    connection.send_packed_command(_packed(connection, commands))  # type: ignore[no-untyped-call]
    replies: list[Any] = []
    error: redis.ResponseError | None = None
    for command in commands:
        try:
            if command[0] == "WAIT" and connection.socket_timeout is not None:  # waits its own ms before replying
                replies.append(connection.read_response(timeout=connection.socket_timeout + command[2] / 1000))
            else:
                replies.append(connection.read_response())
        except redis.ResponseError as exc:
            replies.append(exc)
            error = error or exc
    if error is not None and raise_on_error:
        raise error
    return replies


def _packed(connection: Connection, commands: Sequence[Sequence[Any]]) -> Any:
    """The commands as RESP: hiredis's packer alone costs a tenth of the connection's layers around it."""
    if HIREDIS_AVAILABLE:
        try:
            return [b"".join([hiredis.pack_command(tuple(command)) for command in commands])]
        except UnicodeEncodeError:
            pass  # text read with surrogateescape: the connection's packer writes it back as the same bytes
    return connection.pack_commands(commands)  # type: ignore[no-untyped-call]
