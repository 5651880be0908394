"""Waiting on empty queues: a blocking move (``BLMOVE``) parked on each queue, so a job pushed to any of them wakes
the fetcher at once, with no sleep and no help from the pusher (a Ruby or foreign pusher wakes it too).

No Redis command blocks on several lists and moves, so each queue has a connection of its own with a ``BLMOVE``
outstanding for the rest of the fetch's wait, followed in the same round trip by an ``LLEN`` of that queue: the reply
says whether a backlog is left, so the next fetch blocks again directly (light load: one blocking command per job)
or takes a batch with the fetch script. The leader waits on all of them at once (``select``); a wait that ends
without a job ends every move, so none is parked between an idle fetch and the next.

The ledger must know each working list's order (ledger.py): each queue moves into its own working list here, and
before a fetch script runs, every parked move is ended (``CLIENT UNBLOCK``) and its reply read, so no move is under
way while the script moves jobs into the same lists. A paused queue's move is ended the same way, before the next
wait. Standalone Redis (and Sentinel) only: on a cluster the fetcher keeps its poll.
"""

from __future__ import annotations

import selectors
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis import exceptions as redis_errors

import kiq.ext

LARGE_JOB = 1 << 20  # characters: a job this large frees its connection's read buffer (as kiq's fetch connection)


@dataclass(slots=True)
class Moved:
    """What a parked move brought: its queue's key, the job (None: it timed out or was ended), the backlog left."""

    queue: str
    job: str | None
    backlog: int


class Parked:
    """One queue's connection and whether a move is outstanding on it."""

    __slots__ = ("commands", "connection", "id", "outstanding", "working")

    def __init__(self, connection: Any, queue: str, working: str, timeout: float) -> None:
        self.connection = connection
        self.working = working
        self.id = 0  # the connection's CLIENT ID, read again after each reconnection
        self.outstanding = False
        # packed once: the same move every time (a wait shorter than its timeout ends it: ParkedMoves.end)
        self.commands = connection.pack_commands(
            [("BLMOVE", queue, working, "RIGHT", "LEFT", round(timeout, 3)), ("LLEN", queue)]
        )

    def park(self) -> None:
        if not self.id or self.connection._sock is None:  # (re)connected: its id is new
            self.connection.send_command("CLIENT", "ID")
            self.id = self.connection.read_response()
        self.connection.send_packed_command(self.commands)
        self.outstanding = True

    def read(self, queue: str) -> Moved:
        """The outstanding move's reply (an error reply, such as Redis at maxmemory refusing BLMOVE, is raised)."""
        self.outstanding = False
        refused: redis_errors.ResponseError | None = None
        try:
            job = self.connection.read_response()
        except redis_errors.ResponseError as exc:
            refused, job = exc, None
        backlog = self.connection.read_response()
        if refused is not None:
            raise refused
        if job is not None and len(job) > LARGE_JOB:
            # the reader keeps a buffer as large as the largest reply until it reads again, which a parked move
            # may not do for long, while the job runs with its own copies: free it (the next park reconnects)
            self.connection.disconnect()
        return Moved(queue, job, backlog)

    def socket(self) -> Any:
        return self.connection._sock  # redis-py keeps the socket private; select needs it


class ParkedMoves:
    """The parked moves of one fetcher, by queue key; each blocks for at most ``timeout`` seconds in Redis (a wait
    may end it sooner)."""

    def __init__(self, redis: Any, timeout: float) -> None:
        self._pool = redis.connection_pool
        self._redis = redis
        self._timeout = timeout
        self._parked: dict[str, Parked] = {}
        # kept from wait to wait (a selector per wait cost four system calls a job at light load): the sockets of
        # the outstanding moves, by queue, as registered
        self._selector = selectors.DefaultSelector()  # not select(): a worker may hold more than 1,024 descriptors
        self._watched: dict[str, Any] = {}
        self._master = kiq.ext.master_generation(redis)

    def moved_to_new_master(self) -> bool:
        """Whether the worker moved to a new Sentinel master since the last call (``kiq.ext.master_generation``).
        If so, the parked connections are dropped, their replies unread: redis-py keeps a connection on the address
        it had, and a move parked on the old master would go on taking jobs there, which the new master still holds
        and runs again (the old master discards its writes when it is demoted)."""
        master = kiq.ext.master_generation(self._redis)
        if master == self._master:
            return False
        self._master = master
        self.drop()
        return True

    @property
    def outstanding(self) -> list[str]:
        return [queue for queue, parked in self._parked.items() if parked.outstanding]

    def wait(self, moves: Iterable[tuple[str, str]], timeout: float) -> list[Moved]:
        """Park a move (for ``timeout`` seconds) from each (queue, working list) of ``moves`` that has none
        outstanding, end those on queues not in ``moves`` (paused meanwhile), and return what arrived within
        ``timeout`` seconds."""
        wanted = dict(moves)
        moved = self.end([queue for queue in self.outstanding if queue not in wanted])
        if moved:
            return moved
        for queue, working in wanted.items():
            parked = self._parked.get(queue)
            if parked is None:
                connection = self._pool.get_connection()
                parked = self._parked[queue] = Parked(connection, queue, working, self._timeout)
            if not parked.outstanding:
                parked.park()
        return self.ready(timeout)

    def ready(self, timeout: float = 0.0) -> list[Moved]:
        """The replies of the moves that are in (waiting up to ``timeout`` for a first one)."""
        outstanding = self.outstanding
        if not outstanding:
            return []
        try:
            self._watch(outstanding)
            events = self._selector.select(timeout)
        except (OSError, ValueError, KeyError) as exc:  # a socket closed under us
            self.drop()
            raise redis_errors.ConnectionError(f"a parked fetch lost its connection: {exc}") from exc
        return self._read([key.data for key, _ in events])

    def _watch(self, queues: list[str]) -> None:
        """Register the sockets of ``queues``' moves, and only those (a socket replaced by a reconnection too)."""
        watched = self._watched
        for queue in [queue for queue in watched if queue not in queues]:
            self._selector.unregister(watched.pop(queue))
        for queue in queues:
            sock = self._parked[queue].socket()
            if watched.get(queue) is not sock:
                if queue in watched:
                    self._selector.unregister(watched.pop(queue))
                self._selector.register(sock, selectors.EVENT_READ, queue)
                watched[queue] = sock

    def end(self, queues: list[str] | None = None) -> list[Moved]:
        """End the outstanding moves (of ``queues``, default all) and return their replies: a move Redis served
        before the end is in its reply, so none is under way afterwards."""
        queues = self.outstanding if queues is None else queues
        if not queues:
            return []
        pipe = self._redis.pipeline(transaction=False)
        for queue in queues:
            pipe.client_unblock(self._parked[queue].id)
        pipe.execute()
        return self._read(queues)

    def drop(self) -> None:
        """Disconnect every parked connection (their replies unread: the fetcher reconciles its lists)."""
        self._unwatch()
        for parked in self._parked.values():
            parked.connection.disconnect()
            self._pool.release(parked.connection)
        self._parked.clear()

    def _unwatch(self) -> None:
        self._selector.close()
        self._selector = selectors.DefaultSelector()
        self._watched.clear()

    def close(self) -> list[Moved]:
        """End every move and give the connections back; returns what the last replies brought."""
        try:
            moved = self.end()
        except redis_errors.RedisError:
            self.drop()
            raise
        self._unwatch()
        for parked in self._parked.values():
            self._pool.release(parked.connection)
        self._parked.clear()
        return moved

    def _read(self, queues: list[str]) -> list[Moved]:
        moved = []
        for queue in queues:
            try:
                moved.append(self._parked[queue].read(queue))
            except redis_errors.OutOfMemoryError:
                raise  # the fetcher polls from now on; the connections are fine
            except BaseException:
                self.drop()  # broken, or talking to a replica after a failover: new connections next time
                raise
        return moved
