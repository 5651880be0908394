"""bench/cluster.py's report: its drains against the standalone server's, round by round, the commands per primary
and issue 34's spread target, and its rows of bench/all.py's costs table."""

from __future__ import annotations

import statistics
from typing import Any

from bench import cost
from bench.report import render_table

STANDALONE = "standalone"  # the target every cluster drain is compared with
SPREAD_QUEUES = 3
SPREAD_TARGET = 0.25  # issue 34: each primary's share of the commands within ±25 % of even


def _base(rows: list[dict[str, Any]], row: dict[str, Any]) -> dict[str, Any] | None:
    """The standalone drain with the same fetch and queues as ``row``."""
    return next(
        (
            other
            for other in rows
            if other["target"] == STANDALONE and not other.get("error") and other["fetch"] == row["fetch"]
            and len(other["queues"]) == len(row["queues"])
        ),
        None,
    )  # fmt: skip


def one_line(text: str, limit: int = 300) -> str:
    """``text`` fit for a table cell: one line, no pipes, at most ``limit`` characters."""
    flat = " ".join(text.split()).replace("|", "/").replace("`", "'")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def paired(row: dict[str, Any], base: dict[str, Any], key: str) -> list[float]:
    """``row``'s ``key`` over the standalone drain's in each round both ran (drains of one round ran minutes apart
    at most, so a busy moment of a shared machine weighs on both); one ratio for a run without rounds."""
    by_round = {drain["round"]: drain[key] for drain in base.get("rounds", [])}
    ratios = [drain[key] / by_round[drain["round"]] for drain in row.get("rounds", []) if by_round.get(drain["round"])]
    return ratios or [row[key] / base[key]]


def _vs(row: dict[str, Any], base: dict[str, Any] | None, key: str, digits: int = 2) -> str:
    """``row``'s ``key``, and the median of its ratios to the standalone drain's round by round."""
    value = row[key]
    text = f"{value:,.0f}" if value >= 100 else f"{value:.{digits}f}"
    return f"{text} ({statistics.median(paired(row, base, key)):.2f}x)" if base else text


def drain_table(rows: list[dict[str, Any]]) -> str:
    headers = [
        "target", "fetch", "queues", "jobs/s (vs standalone)", "Redis CPU µs/job, all primaries (vs standalone)",
        "worker CPU µs/job (vs standalone)",
    ]  # fmt: skip
    table = [headers, ["---"] * len(headers)]
    notes = []
    for row in rows:
        if row.get("error"):
            table.append([row["target"], row["fetch"], "-", f"not measured: {one_line(row['error'])}", "-", "-"])
            continue
        base = None if row["target"] == STANDALONE else _base(rows, row)
        table.append([
            row["target"], row["fetch"], ", ".join(row["queues"]),
            _vs(row, base, "jobs/s"), _vs(row, base, "redis_us"), _vs(row, base, "worker_us", 1),
        ])  # fmt: skip
        rates = [drain["jobs/s"] for drain in row.get("rounds", [])]
        if len(rates) > 1:
            note = f"{row['setup']}: the median of {len(rates)} drains ({min(rates):,.0f} to {max(rates):,.0f} jobs/s)"
            if base:
                ratios = paired(row, base, "jobs/s")
                note += f"; jobs/s over the standalone drain's round by round: {', '.join(f'{r:.2f}x' for r in ratios)}"
            notes.append(note)
        if row.get("notes"):
            logged = "; ".join(f"`{one_line(note)}`" for note in row["notes"])
            notes.append(f"{row['setup']}: every job ran (retry and dead empty), but the worker logged {logged}")
    return render_table(table, notes)


def spread(row: dict[str, Any]) -> tuple[dict[str, float], float]:
    """Each primary's share of the drain's command calls over an even share (1.0: even), and the largest
    deviation from even."""
    calls = {port: float(node["calls"]) for port, node in row["nodes"].items()}
    even = sum(calls.values()) / len(calls)
    ratios = {port: value / even if even else 0.0 for port, value in calls.items()}
    return ratios, max(abs(ratio - 1) for ratio in ratios.values())


def spread_table(rows: list[dict[str, Any]]) -> str:
    """Per primary, for the cluster drains over several queues: the queues it owns, its command calls (total and
    per job), its share against an even one, and its Redis CPU per job."""
    headers = ["layout, fetch", "primary", "queues on it", "commands", "commands/job", "vs even", "Redis CPU µs/job"]
    table = [headers, ["---"] * len(headers)]
    for row in rows:
        if row.get("error") or row["target"] == STANDALONE or len(row["queues"]) < 2:
            continue
        ratios, worst = spread(row)
        for port, node in sorted(row["nodes"].items()):
            names = ", ".join(name for name, owner_port in row["queues"].items() if owner_port == port) or "-"
            table.append([
                f"{row['target']}, {row['fetch']}", f":{port}", names, f"{node['calls']:,}",
                f"{node['calls'] / row['jobs']:.2f}", f"{ratios[port] - 1:+.0%}", f"{node['redis_us']:.2f}",
            ])  # fmt: skip
        verdict = "within" if worst <= SPREAD_TARGET else "**not within**"
        table.append([f"{row['target']}, {row['fetch']}", "largest deviation", "", "", "", f"{worst:.0%}",
                      f"{verdict} ±{SPREAD_TARGET:.0%}"])  # fmt: skip
    return render_table(table, [])


def targets(run: dict[str, Any]) -> list[list[str]]:
    """(target, measured, met) of issue 34's spread target, from the queue layout's basic drain over 3 queues."""
    row = next(
        (r for r in run["drains"] if r["target"] == "cluster, slots = queue" and r["fetch"] == "basic"
         and len(r.get("queues", ())) == SPREAD_QUEUES and not r.get("error")),
        None,
    )  # fmt: skip
    target = f'cluster, slots = "queue", {SPREAD_QUEUES} queues: commands per primary within ±{SPREAD_TARGET:.0%}'
    if row is None:
        return [[target, "-", "not measured"]]
    ratios, worst = spread(row)
    shares = ", ".join(f":{port} {ratio - 1:+.0%}" for port, ratio in sorted(ratios.items()))
    return [[target, f"{shares} (largest **{worst:.0%}**)", "met" if worst <= SPREAD_TARGET else "**not met**"]]


def costs(run: dict[str, Any]) -> list[list[str]]:
    """(feature, cost, measured as) of each cluster drain against the standalone one: bench/all.py's costs table."""
    rows = []
    for row in run["drains"]:
        base = None if row.get("error") or row["target"] == STANDALONE else _base(run["drains"], row)
        if base is None:
            continue
        queues = f"{len(row['queues'])} queue{'s' if len(row['queues']) > 1 else ''}"
        rows.append([
            f"Redis Cluster ({run['settings']['primaries']} primaries), {row['target'].removeprefix('cluster, ')}: "
            f"{row['fetch']} drain, {queues}",
            f"{statistics.median(paired(row, base, 'jobs/s')):.2f}x the standalone drain",
            f"bench/cluster.py: {row['jobs/s']:,.0f} vs {base['jobs/s']:,.0f} jobs/s; Redis CPU {row['redis_us']:.2f} "
            f"vs {base['redis_us']:.2f} µs/job (all primaries), worker CPU {row['worker_us']:.1f} vs "
            f"{base['worker_us']:.1f} µs/job",
        ])  # fmt: skip
    return rows


def markdown(run: dict[str, Any]) -> str:
    settings = run["settings"]
    queues = ", ".join(f"{name} (slot {slot}, :{port})" for name, (slot, port) in settings["spread_queues"].items())
    rounds = settings["rounds"]
    lines = [
        f"{settings['jobs']:,} no-op jobs per drain, one `kiq worker -c 10`; "
        f"{'the median of ' + str(rounds) + ' alternating drains' if rounds > 1 else 'one drain'} per setup. "
        f"Cluster: {settings['primaries']} primaries, no replicas ({settings['cluster']}); standalone: one "
        f"redis-server ({settings['standalone']}); the same redis-server binary and CPU. Ratios are to the "
        f"standalone server's drain with the same fetch and queues in this run: the median of their ratios round by "
        f"round. Three queues: {queues} — names "
        "picked so that each queue's slot is on a different primary.",
        "",
        drain_table(run["drains"]),
        "Commands per primary over the drain window (`INFO commandstats`; the harness's "
        f"{', '.join(sorted(cost.HARNESS))} left out; a Lua script's commands counted as well as the script):",
        "",
        spread_table(run["drains"]),
        render_table([["target", "measured", "result"], ["---"] * 3, *targets(run)], []),
    ]
    return "\n".join(lines)
