"""How long the dashboard takes to answer on big sets: a retry set of 1,000,000 entries (and a queue of
1,000,000 jobs), each page asked over real HTTP, timed from the request to the last byte.

    .venv/bin/python bench/web_paging.py [--entries 1000000] [--redis-url redis://127.0.0.1:6390/0]

Without ``--redis-url`` it runs on the embedded Redis in a temporary directory. Pages asked: the first, one in the
middle and the last, in both orders, a job's own page, the Retries and Queues lists, the queue's middle page and
the Dashboard. Each figure is the median of ``--runs`` requests (the first, which warms the connection, is not
counted). The pages read ranks (``ZRANGE``/``LRANGE``) and sizes, never the whole set, so the time stays that of
a small set; the text filter (``?q=``) looks at a window of ``FILTER_WINDOW`` entries per request: a filter with
no match, from the start and searching further from the middle of the set, is timed with the pages.
The flushed database is the one of the URL given: use a Redis of your own.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import urllib.request
from urllib.parse import quote

import kiq
import kiq.ext
from kiq.api import Queue, RetrySet
from kiq.contrib.http import serve_in_background
from kiq.contrib.web import wsgi_app
from kiq.contrib.web.sets import FILTER_WINDOW
from kiq.embedded import EmbeddedRedis

BATCH = 10_000


def fill(config: kiq.Config, entries: int) -> None:
    """``entries`` retries and as many queued jobs, written in pipelined batches (what a failing deploy leaves)."""
    redis = config.redis
    now = time.time()
    for start in range(0, entries, BATCH):
        pipe = redis.pipeline(transaction=False)
        members = {}
        jobs = []
        for n in range(start, min(start + BATCH, entries)):
            jid = f"{n:024x}"
            payload = kiq.ext.dumps({
                "class": "Importer", "args": [n, f"row {n}"], "queue": "imports", "jid": jid, "retry_count": 3,
                "error_class": "TimeoutError", "error_message": f"row {n} timed out", "failed_at": now,
                "created_at": now, "enqueued_at": now,
            })  # fmt: skip
            members[payload] = now + n
            jobs.append(payload)
        pipe.zadd(RetrySet.name, members)
        pipe.lpush(kiq.ext.keyspace(redis).queue("imports"), *jobs)
        pipe.sadd("queues", "imports")
        pipe.execute()


def timed(url: str, runs: int) -> tuple[float, int]:
    """The median milliseconds of ``runs`` GETs of ``url``, and the answer's status."""
    times = []
    status = 0
    for run in range(runs + 1):
        started = time.perf_counter()
        with urllib.request.urlopen(url) as answer:
            answer.read()
            status = answer.status
        if run:
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--redis-url")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        url = args.redis_url or EmbeddedRedis(workdir).ensure_running()
        config = kiq.Config(redis_url=url)
        config.redis.flushdb()
        started = time.perf_counter()
        fill(config, args.entries)
        print(f"filled {RetrySet(config).size:,} retries and {Queue('imports', config).size:,} queued jobs "
              f"in {time.perf_counter() - started:.1f} s on {url}")  # fmt: skip
        server = serve_in_background(wsgi_app(config))
        base = f"http://127.0.0.1:{server.server_port}"
        pages = args.entries // 25 + (args.entries % 25 > 0)
        entry = RetrySet(config).page(args.entries // 2, 1)[0]
        middle_key = f"{entry.score!r}-{entry.jid}"
        halfway = args.entries // 2
        middle = RetrySet(config).search("no such text", False, None, 25, halfway).resume or ""
        checks = [
            ("Retries, page 1", "/retries"),
            ("Retries, middle page", f"/retries?page={pages // 2}"),
            ("Retries, last page", f"/retries?page={pages}"),
            ("Retries, last page, newest first", f"/retries?page={pages}&order=newest"),
            ("a retry's own page", f"/retries/{middle_key}"),
            ("Queues", "/queues"),
            ("the queue, middle page", f"/queues/imports?page={pages // 2}"),
            ("Dashboard", "/"),
            (f"filter, no match ({FILTER_WINDOW:,} entries)", "/retries?q=no+such+text"),
            ("filter, searching further (middle)", f"/retries?q=no+such+text&after={quote(middle)}&searched={halfway}"),
        ]
        print(f"\n{'page':<36} {'median ms':>10}  status   ({args.runs} requests each, {args.entries:,} entries)")
        slowest = 0.0
        for label, path in checks:
            ms, status = timed(base + path, args.runs)
            slowest = max(slowest, ms)
            print(f"{label:<36} {ms:>10.1f}  {status}")
        print(f"\nslowest page: {slowest:.1f} ms ({'under' if slowest < 1000 else 'OVER'} 1 s)")
        server.shutdown()
        if not args.redis_url:
            EmbeddedRedis(workdir).stop()


if __name__ == "__main__":
    main()
