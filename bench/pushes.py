"""Single pushes and ``push_bulk`` of kiq against Ruby Sidekiq in alternating pairs (``python -m bench.cost``'s
push phase; the issue's "median of 5 alternating runs").

Each round pushes, with each system's own pusher (bench/systems: ``perform_async`` / ``perform_async`` in a loop,
``perform_bulk`` / ``push_bulk`` in batches of 1,000), ``single`` jobs one by one and then ``bulk`` jobs, on a
flushed Redis, kiq first in even rounds and Sidekiq first in odd ones, so a noisy moment of a shared machine hits
both alike; each run is timed by its pusher around its push loop. Reported: the median rate of each, the median of
the per-round ratios, and every round's ratio.
"""

from __future__ import annotations

import statistics
from typing import Any

from bench.runner import Runner
from bench.systems import BY_NAME

KIQ, SIDEKIQ = "kiq_basic", "sidekiq"
MODES = ("single", "bulk")
TARGETS = {"single": 1.5, "bulk": 2.5}  # kiq's rate over Sidekiq's (performance round 3)


def alternating(runner: Runner, rounds: int, single: int, bulk: int) -> dict[str, Any]:
    rates: dict[str, dict[str, list[float]]] = {mode: {KIQ: [], SIDEKIQ: []} for mode in MODES}
    for round_ in range(rounds):
        for name in (KIQ, SIDEKIQ) if round_ % 2 == 0 else (SIDEKIQ, KIQ):
            for mode, count in (("single", single), ("bulk", bulk)):
                runner.redis.flushall()
                pushed = runner.push(BY_NAME[name], mode, count)
                rates[mode][name].append(count / pushed["seconds"])
        runner.redis.flushall()
        print(f"   pushes, round {round_ + 1}: " + "; ".join(
            f"{mode} {rates[mode][KIQ][-1] / rates[mode][SIDEKIQ][-1]:.2f}x" for mode in MODES
        ), flush=True)  # fmt: skip
    out: dict[str, Any] = {"rounds": rounds, "single_jobs": single, "bulk_jobs": bulk}
    for mode in MODES:
        ratios = [mine / theirs for mine, theirs in zip(rates[mode][KIQ], rates[mode][SIDEKIQ], strict=True)]
        out[mode] = {
            "kiq": statistics.median(rates[mode][KIQ]),
            "sidekiq": statistics.median(rates[mode][SIDEKIQ]),
            "ratio": statistics.median(ratios),
            "ratios": ratios,
        }
    return out


def table(pushes: dict[str, Any]) -> str:
    lines = [
        f"Pushes in alternating pairs: {pushes['rounds']} rounds, {pushes['single_jobs']:,} single pushes and "
        f"{pushes['bulk_jobs']:,} jobs by push_bulk (batches of 1,000) per system and round.",
        "",
        "| push | kiq basic (jobs/s, median) | Sidekiq (jobs/s, median) | median of the rounds' ratios | each round |",
        "| --- | --- | --- | --- | --- |",
    ]
    for mode, what in (("single", "single (one call per job)"), ("bulk", "push_bulk of 1,000")):
        row = pushes[mode]
        each = ", ".join(f"{ratio:.2f}x" for ratio in row["ratios"])
        lines.append(f"| {what} | {row['kiq']:,.0f} | {row['sidekiq']:,.0f} | **{row['ratio']:.2f}x** | {each} |")
    return "\n".join(lines) + "\n"


def targets(pushes: dict[str, Any]) -> list[list[str]]:
    rows = []
    for mode, what in (("single", "single push"), ("bulk", "push_bulk of 1,000")):
        ratio, limit = pushes[mode]["ratio"], TARGETS[mode]
        rows.append([
            f"{what} ≥ {limit:g}x Sidekiq (median of {pushes['rounds']} alternating pairs)",
            f"**{ratio:.2f}x** ({pushes[mode]['kiq']:,.0f} vs {pushes[mode]['sidekiq']:,.0f} jobs/s)",
            "met" if ratio >= limit else "**not met**",
        ])  # fmt: skip
    return rows
