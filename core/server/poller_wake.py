"""The poller's wake-up: a thread subscribed to ``kiq:poller-wake`` (``kiq.keys.POLLER_WAKE``), on which every push of a
scheduled job and every recorded retry publishes ``"<set> <score>"``. The poller then sleeps until the earliest due
score it knows of instead of polling more often: a job scheduled earlier than that wakes it.

A message that does not parse is ignored (anyone may publish on a channel). While the subscription is down (Redis
unreachable, a failover), the poller's regular polls still find every due job; after a reconnection the poller is
told to look at both sets once, for what was pushed meanwhile. When the worker moves to a new Sentinel master
(``follow_new_master``), the subscription is made again there.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis as redis_py

from ..backoff import Backoff
from ..keys import POLLER_WAKE, RETRY, SCHEDULE, keyspace
from ..pipeline import master_generation

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("kiq")

# seconds one read of the subscription blocks: how long stop() (a worker's quiet) may take; a read that times out
# waits on the socket only, it sends Redis nothing
LISTEN_BLOCK = 0.2
SUBSCRIBE_WAIT = 1.0  # seconds the poller waits for the first subscription before its first pass
RESUBSCRIBE_BACKOFF = (0.5, 10.0)  # pauses between attempts to subscribe again after a failure

Wake = Callable[[str, float], None]  # (set name, due score): a job in that set is due then


class WakeListener:
    """Calls ``wake(set_name, at)`` for each message on the wake channel; after a re-subscription (messages may have
    been missed), ``wake(name, 0.0)`` for both sets. ``subscribed`` is set once the first subscription is in place."""

    def __init__(self, config: Config, wake: Wake) -> None:
        self.config = config
        self.subscribed = threading.Event()
        self._wake = wake
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._channel = keyspace(config.redis).key(POLLER_WAKE)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kiq-poller-wake", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(LISTEN_BLOCK * 2)

    def _run(self) -> None:
        backoff = Backoff(*RESUBSCRIBE_BACKOFF)
        while not self._done.is_set():
            pubsub = self.config.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            master = master_generation(self.config.redis)
            try:
                pubsub.subscribe(self._channel)
                pubsub.get_message(timeout=SUBSCRIBE_WAIT)  # the subscription's confirmation: it is in place
                if self.subscribed.is_set():  # a re-subscription: what was published meanwhile is unknown
                    for name in (RETRY, SCHEDULE):
                        self._wake(name, 0.0)
                self.subscribed.set()
                backoff.reset()
                while not self._done.is_set():
                    message = pubsub.get_message(timeout=LISTEN_BLOCK)
                    if message is not None:
                        self._received(message.get("data"))
                    if master_generation(self.config.redis) != master:
                        break  # the worker moved to a new master (its connection stays on the old): subscribe there
            except (redis_py.RedisError, OSError) as exc:  # the regular polls go on meanwhile
                log.debug("poller wake-up: subscription to %s lost (%s); subscribing again", self._channel, exc)
                self._done.wait(backoff.next())
            finally:
                pubsub.close()

    def _received(self, data: Any) -> None:
        try:
            text = data.decode("utf-8") if isinstance(data, bytes) else str(data)
            name, score = text.split(" ")
            at = float(score)
        except (UnicodeDecodeError, ValueError):
            log.debug("poller wake-up: ignored a message that is not '<set> <score>': %.200r", data)
            return
        if name in (RETRY, SCHEDULE) and math.isfinite(at):
            self._wake(name, at)
