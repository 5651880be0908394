"""kiq.server.signals: the self-pipe that carries signals (and remote ones from the heartbeat) to the main loop."""

from __future__ import annotations

import os
import resource
import signal
from collections.abc import Iterator

import pytest

from kiq.server.signals import SignalPipe


def test_a_signal_sent_by_name_arrives_in_order() -> None:
    with SignalPipe() as pipe:
        pipe.send("TSTP")
        pipe.send("TERM")
        assert pipe.wait(timeout=1) == ["TSTP", "TERM"]
        assert pipe.wait(timeout=0.01) == []


def test_a_signal_from_the_os_wakes_the_wait() -> None:
    with SignalPipe() as pipe:
        os.kill(os.getpid(), signal.SIGTTIN)
        assert pipe.wait(timeout=5) == ["TTIN"]


@pytest.fixture
def past_1024_descriptors() -> Iterator[None]:
    """This process with more than 1,024 descriptors open, as an application that embeds a worker (or a process
    forked from one) may have: a pipe opened now gets numbers that select() cannot take."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the descriptor limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    opened = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in opened:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.usefixtures("past_1024_descriptors")
def test_the_wait_works_with_the_pipe_past_descriptor_1024() -> None:
    with SignalPipe() as pipe:
        assert pipe.read_fd > 1024
        pipe.send("TERM")
        assert pipe.wait(timeout=1) == ["TERM"]
