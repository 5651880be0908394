"""Stop timing against adversaries: TERM with Redis down (the requeue cannot be written), stop signals repeated or
mixed (TERM twice, TERM then INT, TSTP then TERM), a job blocked in a C-level socket read in a swarm child, a swarm
child that ignores TERM, and absurd ``-t`` values. The promise held each time: the worker exits within ``-t`` + 2 s
(docs/guide/operations.md, "Stop timing"), and no job is lost (requeued, recovered, or logged for replay)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

import kiq
import kiq.cli
import kiq.cli.worker
from tests.jobs.adversarial import STARTS_FILE
from tests.jobs.stop import STARTED, Stubborn
from tests.outage_support import AofRedis, aof_redis
from tests.support import FAST, FAST_RECOVERY, WorkerProcess, exit_late, refused_start, stopped_after_term, wait_until

pytestmark = pytest.mark.slow

StartWorker = Callable[..., WorkerProcess]

TIMEOUT = 2.0  # the -t given
PROMISE = 2.0  # seconds past -t within which the process exits


def timed_exit(worker: WorkerProcess, started: float) -> tuple[int, float]:
    """The worker's exit status and the seconds from ``started`` to its exit."""
    code = worker.wait(TIMEOUT + 60)
    return code, time.monotonic() - started


def sorted_jids(jids: Iterable[str | None]) -> list[str]:
    return sorted(str(jid) for jid in jids)


def queued_jids(config: kiq.Config) -> list[str]:
    return sorted(str(record.jid) for record in kiq.Queue("default", config))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AofRedis]:
    with aof_redis(tmp_path / "redis") as aof:
        yield aof


def term_with_redis_down(
    server: AofRedis, log: Path, args: list[str], env: dict[str, str]
) -> tuple[list[str], int, str]:
    """Two jobs that ignore the stop running, Redis stopped, then TERM: the jids, the exit status and the log, once
    the exit was in time."""
    config = kiq.Config(redis_url=server.url)
    try:
        jids = sorted_jids(kiq.Client(config).push_bulk({"class": "StopStubborn", "args": [[120]] * 2}))
    finally:
        config.redis.close()
    client = server.client()
    with WorkerProcess(args, server.url, log, env) as worker:
        wait_until(lambda: client.llen(STARTED) == 2, 60, message="the jobs running")
        server.stop()
        worker.signal(signal.SIGTERM)
        code, elapsed = timed_exit(worker, time.monotonic())
        output = worker.output()
    assert elapsed <= TIMEOUT + PROMISE, f"exited {elapsed:.2f} s after TERM with -t {TIMEOUT}\n{output}"
    server.start()
    client.delete(STARTED)
    client.close()
    return jids, code, output


def test_term_with_redis_down_logs_the_running_jobs_for_replay_and_exits_3_in_time(
    server: AofRedis, tmp_path: Path
) -> None:
    """Basic fetch: the running jobs exist only in the worker. A stop whose requeue Redis cannot take must not
    say "lost" and exit 0: each job's payload goes to an ERROR line that can be replayed, and the exit status is 3,
    as for held outcomes (kiq.server.outcomes)."""
    args = ["-r", "tests.jobs.stop", "-c", "2", "-t", str(TIMEOUT)]
    jids, code, output = term_with_redis_down(server, tmp_path / "worker.log", args, FAST)
    assert code == 3, output
    lines = [line for line in output.splitlines() if "ERROR: unwritten job outcome:" in line]
    assert len(lines) == 2, output
    client = server.client()
    for line in lines:  # the replay of docs/guide/guarantees.md puts each job back
        entry = json.loads(line.split("; replay: ", 1)[1])
        client.execute_command(*entry["command"])  # type: ignore[no-untyped-call]
    assert sorted(json.loads(job)["jid"] for job in client.lrange("queue:default", 0, -1)) == jids


def test_term_with_redis_down_and_reliable_fetch_exits_in_time_and_the_jobs_are_recovered(
    server: AofRedis, tmp_path: Path
) -> None:
    """Reliable fetch: the requeue fails too, but the jobs stay in the working list, so the next worker recovers
    them once Redis is back (at least once)."""
    args = ["-r", "tests.jobs.stop", "-c", "2", "-t", str(TIMEOUT), "--fetch", "reliable"]
    jids, code, output = term_with_redis_down(server, tmp_path / "first.log", args, FAST_RECOVERY)
    assert code in (0, 1), output
    client = server.client()
    with WorkerProcess(args, server.url, tmp_path / "second.log", FAST_RECOVERY) as second:
        wait_until(lambda: client.llen(STARTED) == 2, 60, message="the recovered jobs running again")
        assert sorted(client.lrange(STARTED, 0, -1)) == jids
        second.kill()


@pytest.mark.parametrize(
    "signals",
    [(signal.SIGTERM, signal.SIGTERM), (signal.SIGTERM, signal.SIGINT), (signal.SIGINT, signal.SIGTERM)],
    ids=["term-term", "term-int", "int-term"],
)
def test_a_second_stop_signal_cuts_the_stop_short_with_the_jobs_requeued(
    e2e_config: kiq.Config, start_worker: StartWorker, signals: tuple[int, int]
) -> None:
    jids = [Stubborn.perform_async(120) for _ in range(2)]
    timeout = 30.0  # long: the second signal, not the timeout, must end the stop
    worker = start_worker("-r", "tests.jobs.stop", "-c", "2", "-t", str(timeout), env=FAST)
    r = e2e_config.redis
    wait_until(lambda: r.llen(STARTED) == 2, 60, message="the jobs running")
    worker.signal(signals[0])
    wait_until(lambda: "shutting down" in worker.output(), 30, message="the stop under way")
    time.sleep(1.2)  # past SECOND_STOP_AFTER: a signal this late means "now", not a duplicate of the first
    started = time.monotonic()
    worker.signal(signals[1])
    code = worker.wait(timeout + 30)
    elapsed = time.monotonic() - started
    assert code == 0, worker.output()
    assert elapsed <= PROMISE, f"exited {elapsed:.2f} s after the second signal"
    assert queued_jids(e2e_config) == sorted_jids(jids)


def test_tstp_then_term_exits_within_the_timeout_with_the_jobs_requeued(
    e2e_config: kiq.Config, start_worker: StartWorker
) -> None:
    jids = [Stubborn.perform_async(120) for _ in range(2)]
    worker = start_worker("-r", "tests.jobs.stop", "-c", "2", "-t", str(TIMEOUT), env=FAST)
    r = e2e_config.redis
    wait_until(lambda: r.llen(STARTED) == 2, 60, message="the jobs running")
    worker.signal(signal.SIGTSTP)
    wait_until(lambda: "quieting" in worker.output(), 30, message="the worker quiet")
    queued = Stubborn.perform_async(120)  # a quiet worker takes no more
    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    code = worker.wait(TIMEOUT + 30)
    elapsed = time.monotonic() - started
    assert code == 0, worker.output()
    assert elapsed <= TIMEOUT + PROMISE, f"exited {elapsed:.2f} s after TERM with -t {TIMEOUT}"
    assert queued_jids(e2e_config) == sorted_jids([*jids, queued])


def starts_of(path: Path) -> list[str]:
    return [line.split()[1] for line in path.read_text().splitlines()] if path.exists() else []


def test_a_swarm_child_blocked_in_a_socket_read_exits_in_time_with_the_jobs_requeued(
    e2e_config: kiq.Config, start_worker_process: StartWorker, tmp_path: Path
) -> None:
    starts = tmp_path / "starts"
    jids = kiq.Client(e2e_config).push_bulk({"class": "AdvBlockedInRead", "args": [[]] * 4})
    env = {**FAST, STARTS_FILE: str(starts)}
    worker = start_worker_process("-r", "tests.jobs.adversarial", "-c", "2", "-p", "2", "-t", str(TIMEOUT), env=env)
    wait_until(lambda: len(starts_of(starts)) == 4, 60, message="every job blocked in its read")
    elapsed, waited, code = stopped_after_term(worker, TIMEOUT + 60)
    # each child's stop overran (its threads cannot be interrupted in C): exit status 1, jobs requeued at -t
    assert code in (0, 1), worker.output()
    assert elapsed - waited <= TIMEOUT + PROMISE, exit_late(elapsed, waited, TIMEOUT)
    assert queued_jids(e2e_config) == sorted_jids(jids)


def test_a_swarm_child_that_ignores_term_is_killed_in_time_and_its_jobs_recovered(
    e2e_config: kiq.Config, start_worker_process: StartWorker, tmp_path: Path
) -> None:
    """Every child ignores TERM: the parent kills them at -t + KILL_AFTER, and reliable fetch's recovery gives
    their jobs to the next worker (at least once)."""
    r = e2e_config.redis
    jids = [Stubborn.perform_async(120) for _ in range(4)]
    env = {**FAST_RECOVERY, "KIQ_PLUGINS": "reliable_fetch,tests.jobs.adversarial:IgnoreTerm"}
    args = ("-r", "tests.jobs.stop", "-c", "2", "-t", str(TIMEOUT), "--fetch", "reliable")
    swarm = start_worker_process(*args, "-p", "2", env=env)
    wait_until(lambda: r.llen(STARTED) == 4, 60, message="the jobs running")
    elapsed, waited, _ = stopped_after_term(swarm, TIMEOUT + 60)  # the parent kills the children at -t + 1.6 s
    assert elapsed - waited <= TIMEOUT + PROMISE, f"{exit_late(elapsed, waited, TIMEOUT)}\n{swarm.output()}"
    r.delete(STARTED)
    after = start_worker_process("-r", "tests.jobs.stop", "-c", "5", "--fetch", "reliable", env=FAST_RECOVERY)
    wait_until(lambda: set(jids) <= set(r.lrange(STARTED, 0, -1)), 60, message="the killed children's jobs again")
    after.kill()


@pytest.mark.parametrize("timeout", ["0", "0.0"])
def test_t_0_requeues_at_once_and_exits_in_time(
    e2e_config: kiq.Config, start_worker: StartWorker, timeout: str
) -> None:
    jids = [Stubborn.perform_async(120) for _ in range(2)]
    worker = start_worker("-r", "tests.jobs.stop", "-c", "2", "-t", timeout, env=FAST)
    wait_until(lambda: e2e_config.redis.llen(STARTED) == 2, 60, message="the jobs running")
    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    code = worker.wait(30)
    elapsed = time.monotonic() - started
    assert code == 0, worker.output()
    assert elapsed <= PROMISE, f"exited {elapsed:.2f} s after TERM with -t {timeout}"
    assert queued_jids(e2e_config) == sorted_jids(jids)


@pytest.mark.parametrize("timeout", ["1e12", "1e300", "100000000"])
def test_an_absurd_t_is_refused_with_a_clear_error(
    e2e_config: kiq.Config, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], timeout: str
) -> None:
    """``kiq worker -t <absurd>`` exits 2 with the error line, while reading its settings (in this process: the
    refusal is the subject, not a process)."""
    url = e2e_config.redis_url
    assert url is not None
    code, output = refused_start(monkeypatch, capsys, url, ["-r", "tests.jobs.stop", "-t", timeout], FAST)
    assert code == 2, output
    assert "bad value for setting 'timeout'" in output and "must be at most 86400" in output, output
    assert "Traceback" not in output, output
