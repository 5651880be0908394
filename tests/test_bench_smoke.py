"""The benchmark harness's pure parts, on synthetic numbers (the harness itself is run by `make bench`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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


def test_table_names_the_load_rate_in_its_latency_under_load_columns() -> None:
    result = _result("kiq_basic", "kiq basic", 90000.0, 0.3, load_p50_ms=0.1, load_p99_ms=3.5)
    header = report.table([result], load_rate=5000.0).splitlines()[0]
    assert "latency p99 at 5,000/s (ms, lower is better)" in header
    assert "| 3.50 |" in report.table([result], load_rate=5000.0)
    assert "latency p99 at load" in report.table([result]).splitlines()[0]  # a run saved before the load phase


def test_the_load_phase_skips_a_system_that_drains_below_twice_the_load(tmp_path: Path) -> None:
    from bench.runner import Result, Runner, Settings

    tools = Toolchain(tmp_path, "redis://127.0.0.1:1/0", "py", "py", "postgresql://", "s", False)
    runner = Runner(tools, Settings(1000, 10, 10, 100.0, 10.0, logs=tmp_path, load_rate=5000.0))
    result = Result("dramatiq", "Dramatiq", "10 threads", drain_rates=[2600.0])
    runner.load_latency(BY_NAME["dramatiq"], None, result, tmp_path)  # type: ignore[arg-type]  # no Redis touched
    assert result.load_p99_ms is None
    assert result.notes == ["latency at 5,000/s not run: drains below 2x the load (2,600 jobs/s)"]


def test_the_batch_system_pushes_in_a_batch_and_runs_the_batch_plugin() -> None:
    tools = Toolchain(Path("."), "redis://x", "py", "py", "postgresql://", "s", False)
    system = BY_NAME["kiq_batch"]
    assert system.env(tools)["KIQ_PLUGINS"] == "batch"
    assert system.env(tools)["BENCH_BATCH"] == "1"
    assert system.settle is not None and system.settle(tools)[-1] == "bench.systems.batch_settle"


def _all_parts() -> dict[str, object]:
    def noop(system: str, **values: object) -> dict[str, object]:
        return {"system": system, "label": system, "error": None, **values}

    results = [
        noop("kiq_basic", drain_rate=100_000.0, push_single_rate=30_000.0, push_bulk_rate=400_000.0,
             latency_p99_ms=0.5, load_p99_ms=4.0, load_rate_achieved=5000.0),
        noop("kiq_no_metrics", drain_rate=104_000.0),
        noop("kiq_reliable", drain_rate=70_000.0, push_single_rate=30_000.0, latency_p99_ms=0.6, load_p99_ms=12.0,
             load_rate_achieved=4990.0),
        noop("kiq_otel", drain_rate=70_000.0, push_single_rate=28_500.0),
        noop("kiq_tracking", drain_rate=18_000.0, settled_rate=16_000.0),
        noop("kiq_batch", drain_rate=50_000.0, settled_rate=40_000.0, push_single_rate=25_000.0,
             push_bulk_rate=200_000.0),
        noop("sidekiq", drain_rate=10_000.0, push_single_rate=10_000.0, push_bulk_rate=100_000.0),
    ]  # fmt: skip
    settings = {"jobs": 100_000, "drain_runs": 3, "latency_rate": 100.0, "load_rate": 5000.0, "load_seconds": 5.0}

    def cost(system: str, redis_us: float, worker_us: float) -> dict[str, object]:
        """A row of bench/cost.py: Redis and worker CPU µs per job."""
        figures = {"jobs/s": 1e6 / worker_us, "redis_us": redis_us, "worker_us": worker_us, "reads": 0.1}
        return {"system": system, "label": system, "version": "1", **figures, "commands": {}, "ceiling": 1e6 / redis_us,
                "drains": 1}  # fmt: skip

    costs = [cost("sidekiq", 20.0, 60.0), cost("kiq_basic", 4.0, 20.0), cost("kiq_reliable", 5.0, 18.0)]
    costs.append(cost("kiq_no_metrics", 4.0, 19.6))
    cost_run = {"settings": {"jobs": 100_000, "rounds": 1, "poll_us": 13.0}, "cost": costs}
    return {"noop": {"settings": settings, "results": results}, "cost": cost_run}


def test_all_reports_the_features_costs_and_the_targets_met_or_not() -> None:
    from bench import all as everything

    parts = _all_parts()
    targets = {row[0]: row for row in everything.targets(parts)}  # type: ignore[arg-type]
    assert targets["latency push→perform p99 ≤ 2 ms, idle"][2] == "met"
    load = targets["latency p99 ≤ 10 ms under a steady 5,000 jobs/s"]
    assert "reliable **12.00 ms** (at 4,990 jobs/s)" in load[1] and load[2] == "**not met**"
    metrics = targets["dashboard metrics ≤ 3% of the drain"]  # 3.8 % by the drains, 2.0 % by the worker's CPU
    assert "3.8% of the drain" in metrics[1] and "**+2.0%**" in metrics[1] and metrics[2] == "met"
    assert targets["tracking on PostgreSQL ≥ 20,000 jobs/s"][2] == "**not met**"
    assert "= **3.00x**" in targets["single push (kiq basic) ≥ 1.5x Sidekiq"][1]
    assert "= **4.00x**" in targets["push_bulk of 1,000 ≥ 2.5x Sidekiq"][1]
    otel = targets["single push with OTel on (no SDK) ≤ 10% slower than off"]
    assert otel[1].startswith("**5.0% slower**") and otel[2] == "met"
    assert targets["reliable drain ≥ 3x Sidekiq"][2] == "met"
    assert targets["basic drain ≥ 4x Sidekiq"][2] == "met"
    assert targets["-p 2 ≥ 1.8x -p 1 (no-op drain)"][2] == "not measured"
    redis = targets["Redis CPU per job, reliable ≤ 0.2x Sidekiq"]
    assert redis[1] == "5.00 / 20.00 µs = **0.25x**" and redis[2] == "**not met**"
    assert targets["Redis CPU per job, basic ≤ 0.25x Sidekiq"][2] == "met"
    assert targets["worker CPU per job, reliable ≤ 0.3x Sidekiq"][2] == "met"
    assert targets["(round 1) ≥ 5,000 I/O jobs/s in one worker process"][2] == "not measured"
    costs = {row[0]: row[1] for row in everything.costs(parts)}  # type: ignore[arg-type]
    assert costs["batch: drain"] == "+10.0 µs/job"  # 1e6/50,000 - 1e6/100,000
    assert costs["batch: drain until every outcome is counted in the batch"] == "+15.0 µs/job"
    assert costs["dashboard metrics (per-class counts, written per heartbeat)"] == "3.8% of the drain"
    text = everything.markdown({"command": "c", "date": "d", "parts": parts, "errors": {"io": "exited with 1"}})
    assert "## Targets" in text and "**failed**: exited with 1" in text
    assert "| kiq_reliable | 1 | 55,556 | 5.00 (0.25x) | 18.0 (0.30x) | 0.10 |  | 200,000 |" in text


def test_cost_per_job_takes_the_harness_polls_out_and_projects_the_ceiling() -> None:
    from bench import cost
    from bench.runner import Result

    result = Result("kiq_reliable_p1", "kiq reliable -p 1", "c", jobs=1000, drained=1000, drain_rate=50_000.0)
    commands = {"evalsha": (100, 4000.0), "llen": (60, 60.0), "lrem": (1000, 500.0)}
    before = {"redis_cpu": 1.0, "reads": 500, "commands": {}, "polls": 0, "worker_cpu": 2.0, "at": 10.0}
    after = {"redis_cpu": 1.0081, "reads": 663, "commands": commands, "polls": 57, "worker_cpu": 2.02, "at": 10.02}
    row = cost.per_job("kiq_reliable", 1, "0.1.0", result, before, after, poll_cpu=0.00001)
    # 8.1 ms of Redis CPU, 60 polls (57 + the two snapshots + the RENAME) of 10 µs each taken out: 7.5 µs a job
    assert round(row["redis_us"], 6) == 7.5 and round(row["ceiling"]) == 133_333
    assert round(row["reads"], 3) == 0.103  # 163 reads, 60 of them the harness's
    assert row["worker_us"] == pytest.approx(20.0)
    assert row["redis_busy"] == pytest.approx(0.375)  # 7.5 ms of CPU over 20 ms
    assert set(row["commands"]) == {"evalsha", "lrem"}  # the harness's LLEN left out
    assert row["commands"]["evalsha"] == {"calls": 0.1, "us": 4.0}
    sidekiq = {**row, "system": "sidekiq", "label": "Sidekiq", "redis_us": 15.0, "worker_us": 80.0, "drains": 1}
    table = cost.cost_table([sidekiq, {**row, "drains": 3, "rates": [40_000.0, 50_000.0, 60_000.0]}])
    assert "| 7.50 (0.50x) | 20.0 (0.25x) | 0.10 | EVALSHA 0.10 (4.00 µs); LREM 1.00 (0.50 µs) | 133,333 |" in table
    assert "median of 3 drains (40,000 to 60,000 jobs/s)" in table
    assert cost.targets([sidekiq, row])[0][1] == "7.50 / 15.00 µs = **0.50x**"
    assert "| kiq reliable -p 1 | 1 | 50,000 | 38% | 7.50 | 133,333 |" in cost.fleet_table([row])


def test_pushes_in_alternating_pairs_report_the_median_ratio_against_the_targets() -> None:
    from bench import pushes

    def mode(kiq: float, sidekiq: float, ratios: list[float]) -> dict[str, object]:
        return {"kiq": kiq, "sidekiq": sidekiq, "ratio": sorted(ratios)[len(ratios) // 2], "ratios": ratios}

    run = {"rounds": 3, "single_jobs": 5000, "bulk_jobs": 20_000, "single": mode(30_000.0, 19_000.0, [1.4, 1.6, 1.7])}
    run["bulk"] = mode(400_000.0, 150_000.0, [2.4, 2.7, 2.6])
    table = pushes.table(run)
    assert "| single (one call per job) | 30,000 | 19,000 | **1.60x** | 1.40x, 1.60x, 1.70x |" in table
    rows = {row[0]: row for row in pushes.targets(run)}
    assert rows["single push ≥ 1.5x Sidekiq (median of 3 alternating pairs)"][2] == "met"
    assert rows["push_bulk of 1,000 ≥ 2.5x Sidekiq (median of 3 alternating pairs)"][1].startswith("**2.60x**")


def test_pinning_puts_redis_and_the_pushers_on_different_cpus() -> None:
    from bench import machine

    assert machine.pinning(True) == (None, None)
    redis_cpus, pusher_cpus = machine.pinning(False)
    if redis_cpus is not None:  # a machine with 2 CPUs or more
        assert pusher_cpus and not redis_cpus & pusher_cpus
        assert machine.pinning_text(redis_cpus, pusher_cpus).startswith("redis-server on CPU ")


def test_the_costs_of_keyword_and_typed_arguments_are_measured_and_reported(config: object) -> None:
    from bench import all as everything
    from bench import arguments_cost, profile

    rows = arguments_cost.measure(3)  # on the test's Redis: a few calls of each step
    assert len(rows) == 3 * len(arguments_cost.CASES) and all(row["us"] > 0 and row["plain_us"] > 0 for row in rows)
    costs = {row[0]: row[1] for row in everything.costs({"profile": {"arguments": rows}})}
    typed = "typed arguments (UUID, Decimal, datetime): per job (perform)"
    assert costs[typed] == f"{next(r['added_us'] for r in rows if r['what'] == typed):+.1f} µs"
    drain = {"basic": {"jobs/s": 1.0}}
    assert "| keyword arguments (3, JSON values): single push |" in profile.markdown(
        {"push": {"perform_async": 1.0}, "arguments": rows, "drain": drain}
    )


def test_the_cost_of_an_activejob_envelope_is_measured_and_reported() -> None:
    from bench import activejob_cost
    from bench import all as everything

    rows = activejob_cost.measure(3)
    assert rows and all(row["us"] > 0 and row["plain_us"] > 0 for row in rows)
    costs = {row[0]: row[1] for row in everything.costs({"profile": {"activejob": rows}})}
    assert costs[rows[0]["what"]] == f"{rows[0]['added_us']:+.1f} µs/job"


def test_the_cost_of_the_encryption_plugin_is_measured_and_reported() -> None:
    from bench import all as everything
    from bench import encryption_cost

    rows = encryption_cost.measure(3)
    assert len(rows) == 4 and all(row["us"] > 0 and row["plain_us"] > 0 for row in rows)
    costs = {row[0]: row[1] for row in everything.costs({"profile": {"encryption": rows}})}
    assert costs[rows[1]["what"]] == f"{rows[1]['added_us']:+.1f} µs/job"


def test_the_cost_of_the_profiling_plugin_for_an_unprofiled_job_is_measured_and_reported() -> None:
    from bench import all as everything
    from bench import profiling_cost

    rows = profiling_cost.measure(8)
    assert len(rows) == 3 and all(row["us"] > 0 and row["plain_us"] > 0 for row in rows)
    costs = {row[0]: row[1] for row in everything.costs({"profile": {"profiling": rows}})}
    assert costs[rows[0]["what"]] == f"{rows[0]['added_us']:+.2f} µs/job"


def test_the_per_item_cost_of_an_iterable_job_is_measured_and_reported(config: object) -> None:
    from bench import all as everything
    from bench import iteration_cost, profile

    rows = iteration_cost.measure(200, repeat=1)  # on the test's Redis
    assert len(rows) == 2 and all(row["us"] > 0 and row["plain_us"] > 0 for row in rows)
    costs = {row[0]: row[1] for row in everything.costs({"profile": {"iteration": rows}})}
    assert costs[rows[0]["what"]] == f"{rows[0]['added_us']:+.2f} µs/item"
    targets = {row[0]: row[2] for row in everything.targets({"profile": {"iteration": rows}})}
    worst = max(row["added_us"] for row in rows)
    verdict = targets["(iterable jobs) per-item cost ≤ 2 µs over a plain loop, 5 s flush"]
    assert verdict == everything._met(worst <= iteration_cost.TARGET_US)
    shown = profile.markdown({"push": {}, "arguments": [], "iteration": rows, "drain": {"basic": {"jobs/s": 1.0}}})
    assert f"| {rows[0]['what']} |" in shown
