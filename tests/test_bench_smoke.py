"""The benchmark harness's pure parts, on synthetic numbers (the harness itself is run by `make bench`)."""

from __future__ import annotations

import os
from pathlib import Path

from bench import procs, report
from bench.runner import percentile
from bench.systems import BY_NAME, IO_BY_NAME, Toolchain


def _result(system: str, label: str, drain: float, p50: float, **extra: object) -> dict[str, object]:
    return {
        "system": system,
        "label": label,
        "version": "1.0",
        "concurrency": "10 threads",
        "drain_rate": drain,
        "push_bulk_rate": 1000.0,
        "push_single_rate": None,
        "latency_p50_ms": p50,
        "latency_p99_ms": 4.0,
        "peak_rss_mib": 50.0,
        "notes": [],
        "error": None,
        **extra,
    }


def test_table_gives_ratios_to_sidekiq_and_lists_errors_and_notes() -> None:
    results = [
        _result("sidekiq", "Sidekiq (Ruby)", 8000.0, 0.5),
        _result("kiq_basic", "kiq basic", 24000.0, 0.25, notes=["bulk = something"]),
        _result("rq", "RQ", 0.0, 0.0, error="the worker exited with 1"),
    ]
    lines = report.table(results).splitlines()
    kiq_row = next(line for line in lines if line.startswith("| kiq basic"))
    assert "24,000 (3.00x)" in kiq_row
    assert "0.25 (0.50x)" in kiq_row
    assert "| - |" in kiq_row  # push_single_rate was not measured
    rq_row = next(line for line in lines if line.startswith("| RQ"))
    assert rq_row.count("error") == len(report.METRICS)
    assert "- RQ: the worker exited with 1" in lines
    assert "- kiq basic: bulk = something" in lines


def test_table_without_the_baseline_shows_plain_numbers() -> None:
    table = report.table([_result("kiq_basic", "kiq basic", 12345.0, 1.5)])
    assert "12,345 |" in table and "x)" not in table


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 201)]
    assert percentile(values, 0.50) == 100.0
    assert percentile(values, 0.99) == 198.0
    assert percentile([7.0], 0.99) == 7.0


def test_process_tree_memory_of_this_process() -> None:
    assert procs.tree(os.getpid())[0] == os.getpid()
    assert 0 < procs.rss_kib(os.getpid()) <= procs.peak_rss_kib(os.getpid())


def test_tracking_runs_in_its_own_schema() -> None:
    tools = Toolchain(Path("."), "redis://x", "py", "py", "postgresql+psycopg://u:p@h/db", "kiq_bench", False)
    env = BY_NAME["kiq_tracking"].env(tools)
    assert env["KIQ_TRACKING_DATABASE_URL"] == "postgresql+psycopg://u:p@h/db?options=-csearch_path%3Dkiq_bench"
    assert BY_NAME["kiq_otel"].worker(tools)[-2:] == ["--fetch", "reliable"]


def _io_run(*results: dict[str, object]) -> dict[str, object]:
    settings = {"jobs": 20_000, "io_seconds": 0.05}
    return {"kind": "io", "command": "c", "date": "d", "machine": {}, "settings": settings, "results": list(results)}


def test_io_table_gives_ratios_to_the_best_peer_the_ceiling_and_the_targets() -> None:
    run = _io_run(
        _result("kiq_io", "kiq async", 15000.0, 0.0, in_flight=1000, cpu_us_per_job=50.0),
        _result("taskiq_io", "taskiq", 3000.0, 0.0, in_flight=1000, cpu_us_per_job=300.0),
        _result("arq_io", "arq", 1500.0, 0.0, in_flight=1000, cpu_us_per_job=600.0),
        _result("dramatiq_io", "Dramatiq", 0.0, 0.0, error="the worker exited with 1"),
    )
    text = report.markdown(run)
    kiq_row = next(line for line in text.splitlines() if line.startswith("| kiq async"))
    assert "| 5.00x | 75% of 20,000 |" in kiq_row
    assert "| 0.50x |" in next(line for line in text.splitlines() if line.startswith("| arq"))
    assert "15,000 / 3,000 (taskiq) = **5.00x**: met" in text
    assert "kiq async **15,000** jobs/s: met" in text
    assert "- Dramatiq: the worker exited with 1" in text


def test_io_systems_await_the_runs_concurrency() -> None:
    tools = Toolchain(Path("."), "redis://x", "py", "py", "postgresql://", "s", False, io_concurrency=500)
    assert IO_BY_NAME["kiq_io"].worker(tools)[-2:] == ["-a", "500"]
    assert "-a" not in IO_BY_NAME["kiq_io_default"].worker(tools)  # kiq's default: 200
    assert IO_BY_NAME["arq_io"].env(tools) == {"BENCH_IO_CONCURRENCY": "500"}
    taskiq = IO_BY_NAME["taskiq_io"].worker(tools)
    assert taskiq[taskiq.index("--max-async-tasks") + 1] == "500"
    dramatiq = IO_BY_NAME["dramatiq_io"].worker(tools)
    assert dramatiq[dramatiq.index("--threads") + 1] == "500"


def test_processes_table_gives_speedups_and_ratios_to_one_sidekiq() -> None:
    from bench import processes

    def row(system: str, kind: str, rate: float, **extra: object) -> dict[str, object]:
        label = f"{system} label"
        base = {"system": system, "label": label, "version": "1", "concurrency": "c", "drain_rate": rate}
        return {**base, "kind": kind, "cores_busy": 1.0, "peak_rss_mib": 50.0, "notes": [], "error": None, **extra}

    rates = {"kiq_p1": (90.0, 900.0), "kiq_p2": (135.0, 1800.0), "sidekiq_x1": (30.0, 900.0), "sidekiq_x2": (45.0, 0)}
    results = [row(name, "noop", noop) for name, (noop, _) in rates.items()]
    results += [row(name, "cpu", cpu) for name, (_, cpu) in rates.items() if cpu]
    results.append(row("sidekiq_x2", "cpu", 0.0, error="the worker exited with 1"))
    run = {"command": "c", "date": "d", "machine": {}, "settings": {"spin_seconds": 0.001}, "results": results}
    lines = processes.table(run).splitlines()
    kiq2 = next(line for line in lines if line.startswith("| kiq_p2"))
    assert "135 (4.50x) | 1.50x | 1,800 (2.00x) | 2.00x | 2,000" in kiq2
    sidekiq2 = next(line for line in lines if line.startswith("| sidekiq_x2"))
    assert "45 (1.50x) | 1.50x | error | -" in sidekiq2
    assert any("the worker exited with 1" in line for line in lines)


def test_spin_burns_about_the_cpu_asked() -> None:
    import time

    from bench.systems.kiq_cpu import spin

    before = time.thread_time()
    spin(0.002)
    assert 0.002 <= time.thread_time() - before < 0.05
