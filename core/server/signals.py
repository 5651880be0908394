"""Signals in a worker process: the self-pipe that carries them to the main loop, so no work runs inside a signal
handler (``signal.set_wakeup_fd`` writes the signal number into a pipe; the main thread reads it and acts). Remote
signals from the heartbeat are written into the same pipe."""

from __future__ import annotations

import logging
import os
import selectors
import signal
from typing import Any

from .launcher import WORKER_SIGNALS

log = logging.getLogger("kiq")


class SignalPipe:
    """The self-pipe: the C-level handler writes the signal number into a pipe (``signal.set_wakeup_fd``) and
    the main thread reads it and acts, so no work runs inside a signal handler. Remote signals from the
    heartbeat are written into the same pipe."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        for fd in (self.read_fd, self.write_fd):
            os.set_blocking(fd, False)
        # a selector, not select.select: in a process with more than 1,024 descriptors open (an application that
        # embeds the worker, a process forked from one) the pipe's numbers are past what select() takes
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.read_fd, selectors.EVENT_READ)
        self._previous: dict[int, Any] = {}
        self._previous_wakeup = -1

    def __enter__(self) -> SignalPipe:
        self._previous_wakeup = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        for name in WORKER_SIGNALS:
            signum = getattr(signal, f"SIG{name}", None)
            if signum is not None:
                self._previous[signum] = signal.signal(signum, _ignore)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self._previous_wakeup)
        self._close()

    def send(self, name: str) -> None:
        """Deliver a signal by name (from another thread), as if the process had received it."""
        signum = getattr(signal, f"SIG{name}", None)
        if name not in WORKER_SIGNALS or signum is None:
            log.warning("ignoring unknown signal %r", name)
            return
        try:
            os.write(self.write_fd, bytes([signum]))
        except BlockingIOError:
            log.warning("signal pipe full; dropped %s", name)

    def wait(self, timeout: float | None = None) -> list[str]:
        """Block until signals arrive (at most ``timeout`` s); their names in order."""
        self._selector.select(timeout)
        try:
            data = os.read(self.read_fd, 64)
        except BlockingIOError:
            return []
        return [signal.Signals(signum).name[3:] for signum in data if signum in self._previous]

    def forget(self) -> None:
        """In a child forked while this pipe was installed: drop the parent's pipe (the child installs its own)."""
        signal.set_wakeup_fd(-1)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._close()

    def _close(self) -> None:
        self._selector.close()
        os.close(self.read_fd)
        os.close(self.write_fd)


def _ignore(signum: int, frame: object) -> None:
    """The Python-level handler: nothing to do, the wakeup fd already carries the signal to the main loop."""
