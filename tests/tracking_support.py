"""Fixtures and helpers shared by the tracking tests: a tracking database (a fresh SQLite file, and a private
schema in the PostgreSQL of KIQ_TEST_DATABASE_URL when set), a Tracker on it, and in-process job execution
with the real Processor, BasicFetch and Poller."""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, delete, make_url

import kiq
from kiq.fetcher import Capsule
from kiq.plugins.tracking import Tracker, tracker_for
from kiq.plugins.tracking.models import Event, Task
from kiq.plugins.tracking.store import Store
from kiq.server.fetch import BasicFetch
from kiq.server.outcomes import RedisOutage
from kiq.server.processor import Processor
from kiq.server.scheduled import Poller

from .support import missing_service

DATABASE_URL = os.environ.get("KIQ_TEST_DATABASE_URL")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The test PostgreSQL, with ``search_path`` set to a schema of our own that is dropped at the end."""
    if not DATABASE_URL:
        missing_service("KIQ_TEST_DATABASE_URL is not set")
    schema = f"kiq_tracking_test_{secrets.token_hex(4)}"
    admin = create_engine(DATABASE_URL)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    url = make_url(DATABASE_URL).update_query_dict({"options": f"-csearch_path={schema}"})
    yield url.render_as_string(hide_password=False)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def tracking_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tracking.db'}"
    url: str = request.getfixturevalue("postgres_url")
    store = Store(url)
    store.init_schema()
    with store.engine.begin() as conn:  # the schema lives for the session: empty it for this test
        conn.execute(delete(Event))
        conn.execute(delete(Task))
    store.engine.dispose()
    return url


def track(config: kiq.Config, database_url: str) -> Tracker:
    config.add_plugin("tracking")
    config.tracking_database_url = database_url
    config.tracking_flush_interval = 0.02
    return tracker_for(config)


@pytest.fixture
def tracker(config: kiq.Config, tracking_db_url: str) -> Iterator[Tracker]:
    """A Tracker of the ``config`` fixture on the tracking database."""
    tracker = track(config, tracking_db_url)
    yield tracker
    tracker.writer.close(5)
    tracker.store.engine.dispose()


def work_off(config: kiq.Config, queue: str = "default") -> int:
    """Run every job waiting in ``queue`` here, through the real Processor; returns how many ran."""
    capsule = Capsule("default", [(queue, 0)], 1, config, "test:1:tracking")
    fetcher = BasicFetch(capsule)
    processor = Processor(config, fetcher, threading.Event(), RedisOutage(config), "test-processor")
    ran = 0
    while config.redis.llen(f"queue:{queue}"):
        unit = fetcher.retrieve_work()
        if unit is not None:
            processor.process(unit)
            ran += 1
    return ran


def retry_now(config: kiq.Config) -> int:
    """Move every pending retry to its queue now (as the Poller does when they are due)."""
    return Poller(config).enqueue_jobs(now=time.time() + 3600)


class PrivatePostgres:
    """A throwaway PostgreSQL cluster of our own (as root: initdb and pg_ctl run as the ``postgres`` user), so a
    test can really stop the database server and start it again."""

    def __init__(self, bin_dir: str) -> None:
        self.bin_dir = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="kiq-pg-"))  # under /tmp: the postgres user must reach it
        shutil.chown(self.dir, "postgres", "postgres")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._pg("initdb", "-D", str(self.dir / "data"), "-U", "postgres", "-A", "trust", "--no-sync")

    def _pg(self, program: str, *args: str) -> None:
        command = ["runuser", "-u", "postgres", "--", f"{self.bin_dir}/{program}", *args]
        subprocess.run(command, check=True, capture_output=True, timeout=60)

    def _ctl(self, *args: str) -> None:
        self._pg("pg_ctl", "-D", str(self.dir / "data"), "-w", "-t", "30", *args)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._ctl("-l", str(self.dir / "server.log"), "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        """``immediate``: the server dies at once, as in a crash (it recovers on the next start)."""
        self._ctl("stop", "-m", mode)

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A running PrivatePostgres; skipped without root or PostgreSQL's server binaries (unless
    KIQ_REQUIRE_SERVICES=1, as in CI, which installs PostgreSQL and runs as root)."""
    bin_dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda path: int(path.split("/")[-2]))
    missing = (
        "not root" if os.geteuid() != 0
        else "no /usr/lib/postgresql/*/bin" if not bin_dirs
        else "no runuser on the PATH" if shutil.which("runuser") is None
        else ""
    )  # fmt: skip
    if missing:
        missing_service(f"cannot run a private PostgreSQL: {missing}")
    server = PrivatePostgres(bin_dirs[-1])
    try:
        server.start()
        yield server
    finally:
        server.remove()
