"""`make demo`: the AsyncTask scenario (seed 002) end to end on the embedded Redis and SQLite.

Creates a task of a few hundred jobs (some fail a business rule, some raise once and are retried, a few keep
raising and die), runs a real ``kiq worker`` process, shows the progress as a text bar, serves the dashboard
(``kiq.contrib.web``: queues, busy worker, retries, dead jobs, metrics, the task in its Tasks tab) and the task's
live status page while it runs, and prints the final counts per status. Exits 0 by itself when the task is
complete; with ``--serve`` the dashboard stays up until Ctrl-C.

    .venv/bin/python examples/demo.py [--jobs 300] [--job-seconds 0.03] [--serve] [--port 8077]
    make demo PORT=9000                                  # the same, the dashboard on port 9000

The worker imports this file (``-r examples/demo.py``) for the job class, so the demo itself runs only
under ``__main__``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer
from wsgiref.util import shift_path_info

import kiq
from kiq.config import set_default_config
from kiq.embedded import EmbeddedRedis
from kiq.plugins.tracking import TaskFailure, Tracker, message, tracker_for

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 180.0  # seconds: a demo that has not finished by then has a problem worth reporting
JOB_SECONDS = "KIQ_DEMO_JOB_SECONDS"  # how the worker process learns --job-seconds


class DemoEnroll(kiq.Job):
    """Enroll one product of a seller; ``kind`` says how this product's enrollment goes."""

    kiq_name = "DemoEnroll"  # the same wire name whether this file runs as __main__ or is imported by -r
    kiq_options = {"retry": 1}

    def perform(self, product: int, kind: str) -> None:
        message(self, f"checking product {product}")
        mean = float(os.environ.get(JOB_SECONDS, "0.03"))
        time.sleep(random.uniform(mean / 3, mean * 5 / 3))  # "slow" work
        if kind == "unsellable":
            raise TaskFailure(f"product {product} has no price")
        if kind == "broken" or (kind == "flaky" and "retry_count" not in self.job):
            raise ConnectionError(f"catalog service timed out for product {product}")
        message(self, f"product {product} enrolled")

    def retry_in(self, count: int, exc: BaseException, job: dict[str, Any]) -> int:
        return 1  # (plus JobRetry's jitter of up to 9 s)


def kind_of(product: int) -> str:
    if product % 10 == 3:
        return "unsellable"
    if product % 15 == 7:
        return "flaky"
    if product % 50 == 49:
        return "broken"
    return "ok"


def serve(tracker: Tracker, port: int) -> WSGIServer:
    """The dashboard at ``/``, and the tracking endpoints (the task's live status page) under ``/tracking``."""
    from kiq.contrib import tracking_http, web
    from kiq.contrib.http import serve_in_background
    from kiq.contrib.web.command import LOOPBACK_HOSTS

    dashboard = web.wsgi_app(tracker.config)
    tracking = tracking_http.wsgi_app(tracker)

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO", "").startswith("/tracking/"):
            shift_path_info(environ)
            return tracking(environ, start_response)
        return dashboard(environ, start_response)

    # only for this machine's names: a page elsewhere whose name resolves to 127.0.0.1 must not drive the dashboard
    return serve_in_background(app, port=port, allowed_hosts=LOOPBACK_HOSTS)


def bar(task: dict[str, Any], width: int = 40) -> str:
    filled = int(task["progress"] * width)
    counts = "  ".join(f"{status} {count}" for status, count in task["counts"].items())
    return f"[{'#' * filled}{'.' * (width - filled)}] {task['progress']:6.1%}  {counts}"


def start_worker(redis_url: str, database_url: str, workdir: Path, job_seconds: float) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        JOB_SECONDS: str(job_seconds),
        "KIQ_PLUGINS": "tracking",
        "KIQ_TRACKING_DATABASE_URL": database_url,
        "KIQ_POLL_INTERVAL": "0.5",  # retries are due after ~1-10 s: look for them often
        "PYTHONUNBUFFERED": "1",
    }
    log = open(workdir / "worker.log", "wb")  # noqa: SIM115 - the worker process owns it
    return subprocess.Popen(
        [sys.executable, "-m", "kiq.cli", "worker", "-r", str(Path(__file__).resolve()), "-c", "10",
         "--redis-url", redis_url],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def watch(tracker: Tracker, task_id: str, worker: subprocess.Popen[bytes]) -> dict[str, Any]:
    """Draw the progress bar until the task is complete; returns the final summary."""
    live = sys.stdout.isatty()
    deadline = time.monotonic() + TIMEOUT
    last_line = 0.0
    while True:
        task = tracker.task(task_id, with_events=False)
        assert task is not None
        if live:
            print("\r" + bar(task), end="", flush=True)
        elif time.monotonic() - last_line >= 1 or task["complete"]:
            print(bar(task), flush=True)
            last_line = time.monotonic()
        if task["complete"]:
            if live:
                print()
            return task
        if worker.poll() is not None:
            raise SystemExit(f"\nthe worker exited with {worker.returncode}; see its log")
        if time.monotonic() > deadline:
            raise SystemExit(f"\nnot complete after {TIMEOUT:.0f} s")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Without --serve the demo (and its dashboard) exits once the task is complete; with it, the dashboard "
        "and the status page stay up until Ctrl-C: .venv/bin/python examples/demo.py --serve",
    )
    parser.add_argument("--jobs", type=int, default=300, help="jobs in the task (default 300)")
    parser.add_argument("--job-seconds", type=float, default=0.03, help="mean time a job works (default 0.03)")
    parser.add_argument(
        "--serve", action="store_true", help="keep the dashboard up after the task completes, until Ctrl-C"
    )
    parser.add_argument("--port", type=int, default=8077, help="dashboard port (0: any free port)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # clean up (worker, Redis, temp dir) on TERM as on Ctrl-C

    workdir = Path(tempfile.mkdtemp(prefix="kiq-demo-"))
    redis_server = EmbeddedRedis(workdir / "redis")
    worker: subprocess.Popen[bytes] | None = None
    try:
        redis_url = redis_server.ensure_running()
        database_url = f"sqlite:///{workdir / 'tracking.db'}"
        config = kiq.Config(redis_url=redis_url, plugins=["tracking"], tracking_database_url=database_url)
        set_default_config(config)
        tracker = tracker_for(config)
        tracker.store.init_schema()
        try:
            server = serve(tracker, args.port)
        except OSError as exc:  # the port is taken (another demo, a dashboard): say how to choose one
            print(f"the dashboard cannot listen on port {args.port} ({exc.strerror}): choose another, "
                  "make demo PORT=9000 (0: any free port)", file=sys.stderr)  # fmt: skip
            return 2
        products = [[product, kind_of(product)] for product in range(args.jobs)]
        task_id = tracker.create_task(DemoEnroll, products, name=f"enroll {args.jobs} products")
        root = f"http://127.0.0.1:{server.server_port}"
        url = f"{root}/tracking/tasks/{task_id}/page"
        print(f"dashboard: {root}/  (the task: {root}/tabs/tasks/{task_id})")
        print(f"task {task_id}: {args.jobs} jobs pushed to {redis_url}")
        print(f"status page: {url}", flush=True)
        worker = start_worker(redis_url, database_url, workdir, args.job_seconds)
        print(f"worker pid {worker.pid} (log: {workdir / 'worker.log'})", flush=True)
        task = watch(tracker, task_id, worker)
        print("final counts: " + ", ".join(f"{status} {count}" for status, count in task["counts"].items()))
        print(f"complete: {task['done']} of {task['total']} jobs done; dashboard: {root}/", flush=True)
        if not args.serve:
            print("the dashboard stops with the demo; to keep it up: .venv/bin/python examples/demo.py --serve")
        else:
            print("serving the dashboard and the status page until Ctrl-C", flush=True)
            while True:
                time.sleep(1)
        return 0
    except KeyboardInterrupt:
        return 0 if args.serve else 130
    finally:
        if worker is not None and worker.poll() is None:
            worker.terminate()
            worker.wait(30)
        redis_server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
