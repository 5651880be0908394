"""The test suite's own helpers (tests/support.py) where a bound in a test depends on them."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time

from tests.support import CpuWait


def test_the_cpu_wait_of_a_process_never_drops_when_its_threads_end() -> None:
    """A stop ends threads; their wait for a CPU must stay in the sum, or a timing bound that subtracts the wait
    from the time taken (``stopped_after_term``) subtracts a negative one: a worker that exited 4.2 s after TERM
    with ``-t 3`` read as 6.1 s, "-1.90 s of it waiting for a CPU" (a CI-like run)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]  # a queue for the CPUs
    try:
        with CpuWait() as waits:
            until = time.time() + 0.4
            spinners = [threading.Thread(target=spin, args=(until,)) for _ in range(4)]
            for spinner in spinners:
                spinner.start()
            for spinner in spinners:
                spinner.join()
            time.sleep(0.1)  # sampled after they ended
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    readings = [waited for _, waited in waits.samples]
    assert readings[-1] > readings[0]  # it waited: the test saw what it checks
    assert all(later >= earlier for earlier, later in itertools.pairwise(readings)), readings


def spin(until: float) -> None:
    while time.time() < until:
        sum(range(1000))
