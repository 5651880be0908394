"""The dashboard's Metrics page in headless Chromium after a real worker with ``--metrics-port`` ran a shop's jobs
on two queues, some failing; the same run read from the worker's own ``/metrics`` (parsed with prometheus_client).
Grafana cannot run here, so this page is the screenshot docs/guide/operations.md shows; with
``KIQ_WEB_SCREENSHOTS=<dir>`` the run saves it there
(``KIQ_WEB_SCREENSHOTS=docs/images make pytest PYTEST_ARGS=tests/contrib/web/test_metrics_run.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By

import kiq
from kiq.api import Metrics
from tests.jobs.shop_metrics import FAILING_EVERY, EmailReceipt, ResizeImage, SyncStock
from tests.plugins.metrics.support import free_port, get, scrape, value
from tests.support import FAST, WorkerProcess, wait_until

from .conftest import console_errors, save_top

RECEIPTS, IMAGES, SKUS, WAITING = 60, 30, 24, 12
FAILED_SKUS = len(range(0, SKUS, FAILING_EVERY))


def test_the_metrics_page_and_the_workers_port_show_the_same_run(
    e2e_config: kiq.Config,
    start_worker: Callable[..., WorkerProcess],
    dashboard: Callable[..., str],
    browser: Any,
    tmp_path: Path,
) -> None:
    port = free_port()
    worker = start_worker("-r", "tests.jobs.shop_metrics", "-q", "critical", "-q", "default", "-c", "5",
                          "--metrics-port", str(port), env=FAST)  # fmt: skip
    wait_until(lambda: get(port, "/livez", timeout=2)[0] == 200, 30, message=f"the worker's metrics port {port}")
    EmailReceipt.perform_bulk([[order] for order in range(RECEIPTS)])
    ResizeImage.perform_bulk([[image, 5 + (image * 37) % 150] for image in range(IMAGES)])
    SyncStock.perform_bulk([[sku] for sku in range(SKUS)])
    EmailReceipt.set(queue="reports").perform_bulk([[order] for order in range(WAITING)])  # a queue nobody reads

    expected = {"EmailReceipt": (RECEIPTS, 0), "ResizeImage": (IMAGES, 0), "SyncStock": (SKUS, FAILED_SKUS)}

    def written() -> bool:
        jobs = {job.name: (job.processed, job.failed) for job in Metrics(e2e_config).top_jobs().jobs}
        return jobs == expected

    wait_until(written, 60, message="the worker to run every job and write its metrics")

    # the worker's port: exact counters per (queue, class), the histogram's count, the fleet's gauges
    samples = scrape(port)
    for queue, name, attempts, failures in (
        ("critical", "EmailReceipt", RECEIPTS, 0),
        ("default", "ResizeImage", IMAGES, 0),
        ("default", "SyncStock", SKUS, FAILED_SKUS),
    ):
        labels = {"queue": queue, "class": name}
        assert value(samples, "kiq_jobs_processed_total", **labels) == attempts, labels
        assert value(samples, "kiq_jobs_failed_total", **labels) == failures, labels
        assert value(samples, "kiq_job_duration_seconds_count", **labels) == attempts, labels
    # the longest image took 0.15 s: every attempt sits in the 0.25 s bucket, not all in the 10 ms one
    resize = {"queue": "default", "class": "ResizeImage"}
    assert value(samples, "kiq_job_duration_seconds_bucket", **resize, le="0.25") == IMAGES
    assert value(samples, "kiq_job_duration_seconds_bucket", **resize, le="0.01") < IMAGES
    # "reports" is no queue of this worker's (served or named by a registered class): counted as "other"
    assert value(samples, "kiq_queue_size", queue="other") == e2e_config.redis.llen("queue:reports") == WAITING
    assert value(samples, "kiq_queue_size", queue="critical") == value(samples, "kiq_queue_size", queue="default") == 0
    assert value(samples, "kiq_concurrency") == 5 and value(samples, "kiq_processes") == 1
    assert value(samples, "kiq_up") == 1

    # the dashboard's Metrics page: the same runs and failures per class, from the metrics keys
    browser.get(dashboard() + "/metrics")
    assert browser.title == "Metrics · kiq"
    cells = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
             for row in browser.find_elements(By.CSS_SELECTOR, "#metrics tbody tr")]  # fmt: skip
    assert {row[0]: (int(row[1]), int(row[2])) for row in cells} == expected
    assert all(row[5] != "–" and row[6] != "–" for row in cells)  # p50 and p95 from real durations
    save_top(browser, tmp_path, "metrics", 540)
    assert console_errors(browser) == []
    worker.stop()
