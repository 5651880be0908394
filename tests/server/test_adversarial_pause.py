"""Queue pause against adversaries: Redis going away (3 s, 60 s) while a queue is paused and jobs run and fail,
garbage in the ``kiq:paused`` set written by another producer, and queue orders (strict, weighted) with one queue
paused, on real workers (run in this process) and real Redis servers.

What a worker does when it cannot read the paused set: it keeps the view it read last (kiq.paused_queues), so a
paused queue stays paused through an outage, and reads the set again at its next fetch once Redis answers."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

import kiq
from kiq.contrib.web import wsgi_app
from kiq.paused_queues import PausedQueues
from tests.contrib.web.conftest import serve
from tests.contrib.web.http_support import parse, post_form
from tests.jobs.adversarial import STARTS_FILE
from tests.outage_support import AofRedis, aof_redis
from tests.support import FAST, ROOT, InProcessWorker, child_env, wait_until

pytestmark = pytest.mark.slow

StartWorker = Callable[..., InProcessWorker]

BOUND = 1.0  # seconds within which a pause or an unpause applies (docs/guide/operations.md, "Queue pause")
WATCH = 2.0  # seconds a paused queue is watched: none of its jobs may start
ENV = {**FAST, "KIQ_POLL_INTERVAL": "0.5"}


def starts(path: Path, queue: str | None = None) -> list[tuple[str, str, float]]:
    """(queue, jid, epoch) of every job start recorded in ``path``, of ``queue`` only if given."""
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines() if line.count(" ") == 2]
    return [(name, jid, float(at)) for name, jid, at in rows if queue is None or name == queue]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AofRedis]:
    with aof_redis(tmp_path / "redis") as aof:
        yield aof


def push(url: str, queue: str, count: int, ms: int, fail_every: int = 0) -> list[str]:
    config = kiq.Config(redis_url=url)
    try:
        args = [[ms, bool(fail_every) and i % fail_every == 0] for i in range(count)]
        return [jid for jid in kiq.Client(config).push_bulk({"class": "AdvRecorded", "queue": queue, "args": args})
                if jid is not None]  # fmt: skip
    finally:
        config.redis.close()


# -- the view through an outage ---------------------------------------------------------------------------------
def test_the_view_keeps_the_paused_set_through_an_outage_and_reads_it_again_as_soon_as_redis_is_back(
    server: AofRedis,
) -> None:
    client = server.client()
    client.sadd("kiq:paused", "held")
    view = PausedQueues(client, interval=0.05)
    assert view.keys() == frozenset({"queue:held"})
    server.stop()
    time.sleep(0.1)  # past the interval: the next ask reads, and fails
    assert view.keys() == frozenset({"queue:held"})  # the last answer holds: never "nothing paused" for a failure
    view.interval = 3600.0  # from now on only a failed read may bring the next one forward
    server.start()
    client.srem("kiq:paused", "held")
    assert view.keys() == frozenset(), "a failed read must not postpone the next one by a whole interval"
    client.close()


# -- real workers through outages -------------------------------------------------------------------------------
def unpause_when_back(url: str, name: str) -> tuple[threading.Thread, list[float]]:
    """A thread that unpauses ``name`` as soon as Redis takes it (an operator retrying through the outage); the
    list gets the epoch at which it did."""
    done: list[float] = []

    def run() -> None:
        client = redis.Redis.from_url(url, socket_connect_timeout=0.2, socket_timeout=0.5)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                client.srem("kiq:paused", name)
            except redis.RedisError:
                time.sleep(0.02)
                continue
            done.append(time.time())
            break
        client.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done


@pytest.mark.parametrize(
    ("fetch", "stop", "outage"),
    [
        pytest.param("basic", "pause", 3.0, id="basic-3s"),
        pytest.param("reliable", "kill", 3.0, id="reliable-3s"),
        pytest.param("basic", "pause", 60.0, marks=pytest.mark.soak, id="basic-60s"),  # make soak; 3 s: basic-3s
    ],
)
def test_a_paused_queue_stays_paused_through_an_outage_and_an_unpause_applies_once_redis_is_back(
    server: AofRedis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fetch: str, stop: str, outage: float
) -> None:
    client = server.client()
    record = tmp_path / "starts"
    client.sadd("kiq:paused", "held")
    held = push(server.url, "held", 30, 20)
    opened = push(server.url, "open", 400, 30, fail_every=5)  # jobs run and fail throughout
    monkeypatch.setenv(STARTS_FILE, str(record))  # read by the jobs, which run in this process
    env = dict(ENV)
    if fetch == "reliable":
        env["KIQ_PLUGINS"] = "reliable_fetch"
    args = ["-r", "tests.jobs.adversarial", "-q", "held", "-q", "open", "-c", "3", "--fetch", fetch]
    with InProcessWorker(args, server.url, env) as worker:
        wait_until(lambda: len(starts(record, "open")) >= 20, 60, message="jobs of the open queue running")

        server.stop(stop)
        wait_until(lambda: "unreachable" in worker.output(), 30, message="the outage in the log")
        time.sleep(outage)  # the outage's length, not a wait for a condition
        server.start()
        back = time.time()
        wait_until(lambda: [s for s in starts(record, "open") if s[2] > back], 30, message="open jobs after the outage")
        time.sleep(WATCH)  # the window watched after Redis is back: the pause must still hold
        assert not starts(record, "held"), "a job of the paused queue was taken through the outage"

        unpaused = time.time()
        client.srem("kiq:paused", "held")
        first = wait_until(lambda: starts(record, "held"), 30, message="the held jobs after the unpause")[0][2]
        assert first - unpaused <= BOUND, f"the first held job started {first - unpaused:.2f} s after the unpause"

        # again, the unpause made during the outage (retried until Redis takes it): it applies once Redis is back
        client.sadd("kiq:paused", "held")
        time.sleep(BOUND)  # the pause applies
        more = push(server.url, "held", 10, 20)
        server.stop(stop)
        wait_until(lambda: worker.output().count("unreachable") >= 2, 30, message="the second outage in the log")
        thread, done = unpause_when_back(server.url, "held")
        time.sleep(min(outage, 3.0))
        server.start()
        thread.join(60)
        assert done, "the unpause never went through"
        first = wait_until(lambda: [s for s in starts(record, "held") if s[1] in more], 30)[0][2]
        assert first - done[0] <= BOUND, f"the held job started {first - done[0]:.2f} s after the unpause went in"

        every = set(held + opened + more)
        try:
            wait_until(lambda: every <= {jid for _, jid, _ in starts(record)}, 90, message="every job started")
        except AssertionError as exc:  # which never started, and whether Redis still has them
            missing = whereabouts(client, every - {jid for _, jid, _ in starts(record)})
            raise AssertionError(f"{exc}: {missing}; paused: {client.smembers('kiq:paused')}") from None
        assert worker.stop() == 0
        output = worker.output()
    assert output.count("is unreachable") == 2 and output.count("Redis works again") == 2, output
    assert "paused queues" not in output, output  # the failed reads of the paused set are not logged (debug only)
    assert "Internal exception" not in output, output


def whereabouts(client: redis.Redis, jids: set[str]) -> str:
    """Where each of ``jids`` is in Redis (the queues, retry, schedule, dead), or ``gone``: for a failure message."""
    found: dict[str, list[str]] = {jid: [] for jid in jids}
    for key in client.scan_iter():
        kind = client.type(key)
        items = client.lrange(key, 0, -1) if kind == "list" else client.zrange(key, 0, -1) if kind == "zset" else []
        for jid in jids:
            found[jid] += [key] * any(jid in item for item in items)
    return ", ".join(f"{jid}: {' '.join(keys) or 'gone'}" for jid, keys in sorted(found.items()))


# -- garbage in the paused set ----------------------------------------------------------------------------------
ENORMOUS = "q" * 100_000  # under Linux's 128 KiB per command-line argument, so the CLI can name it
GARBAGE = [b"\xff\xfe", b"a\x00b", b"no-such-queue", ENORMOUS.encode(), b"\x1b]0;owned\x07", b"<b>x</b>"]


def kiq_cli(url: str, *args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    argv = [os.fsencode(sys.executable), b"-m", b"kiq.cli", *(os.fsencode(arg) for arg in args), b"--redis-url",
            url.encode()]  # fmt: skip
    return subprocess.run(argv, cwd=ROOT, env=child_env(), capture_output=True, timeout=60, check=False)


def test_garbage_in_the_paused_set_is_harmless_shown_escaped_and_can_be_unpaused(
    e2e_config: kiq.Config, start_worker: StartWorker, tmp_path: Path
) -> None:
    r = redis.Redis.from_url(str(e2e_config.redis_url))  # bytes in, bytes out: as another producer writes
    r.sadd("kiq:paused", *GARBAGE)
    record = tmp_path / "starts"
    jids = push(str(e2e_config.redis_url), "default", 20, 5, fail_every=4)
    worker = start_worker("-r", "tests.jobs.adversarial", "-c", "3", env={**ENV, STARTS_FILE: str(record)})
    wait_until(lambda: set(jids) <= {jid for _, jid, _ in starts(record)}, 60, message="the workers run on")

    listing = kiq_cli(str(e2e_config.redis_url), "queues")
    assert listing.returncode == 0, listing.stderr
    shown = listing.stdout.decode()
    assert "\\xff\\xfe" in shown and "a\\x00b" in shown and "\\x1b]0;owned\\x07" in shown, shown
    assert "\x00" not in shown and "\x1b" not in shown and "\x07" not in shown, "control characters reach the terminal"
    assert "no-such-queue" in shown
    assert ENORMOUS[:99] + "…" in shown and ENORMOUS not in shown  # cut to a cell (kiq.cli.output.MAX_CELL)
    as_json = kiq_cli(str(e2e_config.redis_url), "queues", "--json")
    assert as_json.returncode == 0 and b'"a\\u0000b"' in as_json.stdout, as_json.stderr

    for name in (b"\xff\xfe", b"no-such-queue", ENORMOUS.encode()):
        done = kiq_cli(str(e2e_config.redis_url), "queues", "unpause", name)
        assert done.returncode == 0, done.stderr
        assert name not in r.smembers("kiq:paused")
    assert kiq.Queue("a\x00b", e2e_config).unpause() is True
    assert kiq.Queue("\x1b]0;owned\x07", e2e_config).unpause() is True
    assert r.smembers("kiq:paused") == {b"<b>x</b>"}
    assert worker.stop() == 0
    assert "Internal exception" not in worker.output()


def test_the_dashboard_shows_garbage_in_the_paused_set_escaped(e2e_config: kiq.Config) -> None:
    r = redis.Redis.from_url(str(e2e_config.redis_url))
    r.sadd("kiq:paused", *GARBAGE)
    url, stop = serve(wsgi_app(e2e_config, False, None))
    try:
        with httpx.Client(base_url=url) as browser:
            page = browser.get("/queues")
            assert page.status_code == 200
            assert "<b>x</b>" not in page.text and "&lt;b&gt;x&lt;/b&gt;" in page.text
            assert "\x00" not in page.text and "a\\x00b" in page.text  # (an ESC means nothing to a browser)
            forms = [form for form in parse(page.text).post_forms() if ("op", "unpause") in form.fields]
            assert len(forms) == len(GARBAGE)
            for form in forms:  # but the enormous name's: longer than a URL may be (the API and CLI unpause it)
                if ENORMOUS not in form.action:
                    assert post_form(browser, form.action, form.fields, {"Origin": url}).status_code == 303
    finally:
        stop()
    # left: the enormous name, and the one that is not UTF-8 (see the next test)
    assert r.smembers("kiq:paused") <= {b"\xff\xfe", ENORMOUS.encode()}


@pytest.mark.xfail(
    strict=True,
    reason="the dashboard's URLs carry a queue name that is not UTF-8 as surrogatepass bytes, and the request path "
    "is decoded with 'replace' (the ASGI servers decode it so before kiq sees it): its Unpause button unpauses "
    "nothing (use `kiq queues unpause` or kiq.Queue(name).unpause())",
)
def test_the_dashboard_unpauses_a_queue_whose_name_is_not_utf8(e2e_config: kiq.Config) -> None:
    r = redis.Redis.from_url(str(e2e_config.redis_url))
    r.sadd("kiq:paused", b"\xff\xfe")
    url, stop = serve(wsgi_app(e2e_config, False, None))
    try:
        with httpx.Client(base_url=url) as browser:
            page = browser.get("/queues")
            (form,) = [form for form in parse(page.text).post_forms() if ("op", "unpause") in form.fields]
            post_form(browser, form.action, form.fields, {"Origin": url})
    finally:
        stop()
    assert not r.smembers("kiq:paused")


# -- queue orders with a paused queue ---------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["strict", "weighted"])
def test_the_other_queues_keep_their_order_and_weights_while_one_is_paused(
    e2e_config: kiq.Config, start_worker: StartWorker, tmp_path: Path, order: str
) -> None:
    url = str(e2e_config.redis_url)
    record = tmp_path / "starts"
    kiq.Queue("mid", e2e_config).pause()
    for name in ("high", "mid", "low"):
        push(url, name, 300, 0)
    queues = ["-q", "high", "-q", "mid", "-q", "low"] if order == "strict" else \
        ["-q", "high,3", "-q", "mid,5", "-q", "low,1"]  # fmt: skip
    worker = start_worker("-r", "tests.jobs.adversarial", *queues, "-c", "1", env={**ENV, STARTS_FILE: str(record)})
    wait_until(lambda: len(starts(record)) >= 400, 60, message="400 jobs run")
    taken = [name for name, _, _ in starts(record)]
    assert worker.stop() == 0
    assert "mid" not in taken
    if order == "strict":  # every high job before any low one
        assert taken[:300] == ["high"] * 300, Counter(taken[:300])
    else:  # high comes first 3 times in 4 (mid's weight left out): of the first 200 taken, about 150 are high
        share = Counter(taken[:200])["high"] / 200
        assert 0.6 < share < 0.9, Counter(taken[:200])
