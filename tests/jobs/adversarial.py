"""Jobs and plugins for the adversarial pause and stop tests (``-r tests.jobs.adversarial``).

A job's start is appended to the file named by ``ADV_STARTS`` (one ``queue jid epoch`` line each), not to Redis:
the tests stop Redis while jobs run, and what the workers took meanwhile must still be known."""

from __future__ import annotations

import os
import signal
import socket
import time

import kiq

STARTS_FILE = "ADV_STARTS"  # the environment variable naming the file of job starts


def record_start(job: kiq.Job) -> None:
    with open(os.environ[STARTS_FILE], "a") as starts:
        starts.write(f"{job.job['queue']} {job.jid} {time.time()}\n")


class Recorded(kiq.Job):
    """Records its start, takes ``ms`` milliseconds, then fails if told to (a job failing meanwhile)."""

    kiq_name = "AdvRecorded"
    kiq_options = {"retry": 2}

    def perform(self, ms: int, fail: bool = False) -> None:
        record_start(self)
        time.sleep(ms / 1000)
        if fail:
            raise RuntimeError("failing on purpose")


class BlockedInRead(kiq.Job):
    """Records its start, then blocks in a socket read that never gets data: in C, where neither a thread interrupt
    nor a signal handler reaches it."""

    kiq_name = "AdvBlockedInRead"

    def perform(self) -> None:
        record_start(self)
        reader, writer = socket.socketpair()
        try:
            reader.recv(1)
        finally:
            reader.close()
            writer.close()


class IgnoreTerm:
    """A plugin that makes its worker ignore SIGTERM (set on the main thread at start-up, as a library might)."""

    @kiq.hookimpl
    def kiq_startup(self, config: kiq.Config) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
