"""The soak's accounting and report (bench/soak.py): jobs pushed / done / lost / run twice, the samples' slopes after
the warm-up, latency p99 per window; written as bench/results/soak-<time>.{json,md,png}."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.soak import Soak

WARM_UP = 1 / 6  # the first sixth of the run (10 minutes of 60) is left out of the slopes
FAULT_COLOURS = (("redis restart", "red"), ("kill -9", "orange"), ("maxmemory 0", None), ("maxmemory", "purple"))
SERIES = (("rss_mb", "worker RSS (MB)"), ("fds", "open descriptors"), ("threads", "threads"), ("redis_mb", "Redis MB"))


def done_lines(workdir: Path) -> Iterator[list[str]]:
    """Every complete line of the jobs' logs (bench/soak_jobs.py), split: finished, kind, label, enqueued_at."""
    for path in sorted(workdir.glob("done-*.log")):
        for line in path.read_text().splitlines():
            fields = line.split()
            if len(fields) == 4:
                yield fields


def done_labels(workdir: Path) -> set[str]:
    return {fields[2] for fields in done_lines(workdir)}


def slope(rows: list[dict[str, float]], key: str) -> float | None:
    """Least-squares slope of ``key`` against the minute, per hour."""
    points = [(row["minute"], row[key]) for row in rows if key in row]
    if len(points) < 3:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return None
    return 60 * sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def analyse(soak: Soak, zsets: dict[str, int]) -> dict[str, Any]:
    ledger, plan = soak.ledger, soak.plan
    runs: Counter[str] = Counter()
    latencies: list[tuple[float, float]] = []  # (finished, seconds from enqueued), first run of sync/async jobs
    first_seen: set[str] = set()
    for finished, kind, label, enqueued in done_lines(soak.workdir):
        runs[label] += 1
        if kind in ("sync", "async") and label not in first_seen and float(enqueued) > 0:
            latencies.append((float(finished), float(finished) - float(enqueued)))
        first_seen.add(label)
    pushed = ledger.pushed
    kinds = sorted({kind for kind, _ in pushed.values()})
    by_kind: dict[str, dict[str, int]] = {}
    for kind in kinds:
        labels = [label for label, (each, _) in pushed.items() if each == kind]
        by_kind[kind] = {
            "pushed": len(labels),
            "done": sum(1 for label in labels if runs[label]),
            "lost": sum(1 for label in labels if not runs[label]),
            "duplicates": sum(1 for label in labels if runs[label] > 1),
        }
    lost_labels = sorted(label for label in pushed if not runs[label])
    uncertain_landed = sum(1 for label in ledger.uncertain if runs[label] or runs[f"{label}.a"] or runs[f"{label}:0"])
    wall_start = time.time() - (time.monotonic() - soak.started)
    windows: dict[int, list[float]] = {}
    for finished, seconds in latencies:
        windows.setdefault(int((finished - wall_start) // plan.window), []).append(seconds)
    warm = [row for row in ledger.samples if row["minute"] >= plan.seconds / 60 * WARM_UP]
    return {
        "minutes": plan.seconds / 60,
        "rate": soak.rate,
        "plan": vars(plan),
        "kinds": by_kind,
        "lost": {"total": len(lost_labels), "labels": lost_labels[:50]},
        "push_errors": dict(ledger.push_errors),
        "uncertain_pushes": len(ledger.uncertain),
        "uncertain_landed": uncertain_landed,
        "zsets_at_end": zsets,
        "faults": ledger.faults,
        "samples": ledger.samples,
        "slopes_per_hour": {key: slope(warm, key) for key, _ in SERIES},
        "latency_p99_per_window": [
            {"from_minute": index * plan.window / 60, "jobs": len(values), "p99_s": p99(values)}
            for index, values in sorted(windows.items())
        ],
    }


def summary(result: dict[str, Any]) -> str:
    lines = [f"soak: {result['minutes']:.0f} min, {result['rate']:.0f} pushes/s"]
    lines.append("| kind | pushed | done | lost | run twice or more |")
    lines.append("|---|---:|---:|---:|---:|")
    for kind, row in result["kinds"].items():
        lines.append(f"| {kind} | {row['pushed']:,} | {row['done']:,} | {row['lost']:,} | {row['duplicates']:,} |")
    lines.append("")
    lines.append(f"lost: {result['lost']['total']} {' '.join(result['lost']['labels'][:10])}")
    lines.append(
        f"pushes refused (not counted as pushed): {result['uncertain_pushes']} {result['push_errors']}, "
        f"of which ran anyway: {result['uncertain_landed']}"
    )
    lines.append(f"dead / retry / schedule at the end: {result['zsets_at_end']}")
    loads = [row["load1"] for row in result["samples"] if "load1" in row]
    if loads:
        mean = sum(loads) / len(loads)
        lines.append(f"machine load (1 min) while it ran: {min(loads):.1f} to {max(loads):.1f}, mean {mean:.1f}")
    slopes = ", ".join(
        f"{label} {value:+.2f}/h" if value is not None else f"{label} n/a"
        for (key, label), value in zip(SERIES, result["slopes_per_hour"].values(), strict=True)
    )
    lines.append(f"slopes after the warm-up: {slopes}")
    lines.append(
        "latency p99 per window: "
        + ", ".join(
            f"min {w['from_minute']:g}: {w['p99_s']:.2f} s ({w['jobs']:,} jobs)"
            for w in result["latency_p99_per_window"]
            if w["p99_s"] is not None
        )
    )
    lines.append("faults: " + "; ".join(f"{at:.0f} s {what}" for at, what in result["faults"]))
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> bool:
    """The samples over time, the faults as vertical lines, and p99 per window; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    samples = result["samples"]
    figure, axes = plt.subplots(5, 1, figsize=(10, 13), sharex=True)
    for axis, (key, label) in zip(axes, SERIES, strict=False):
        points = [(row["minute"], row[key]) for row in samples if key in row]
        axis.plot([x for x, _ in points], [y for _, y in points], marker=".")
        axis.set_ylabel(label)
        axis.set_ylim(bottom=0)
    windows = [w for w in result["latency_p99_per_window"] if w["p99_s"] is not None]
    width = result["plan"]["window"] / 60
    axes[4].bar([w["from_minute"] + width / 2 for w in windows], [w["p99_s"] for w in windows], width=width * 0.8)
    axes[4].set_ylabel("latency p99 (s)")
    axes[4].set_xlabel("minutes")
    for axis in axes:
        for at, what in result["faults"]:
            colour = next((c for word, c in FAULT_COLOURS if what.startswith(word)), None)
            if colour:
                axis.axvline(at / 60, color=colour, alpha=0.3, linewidth=1)
    axes[0].set_title(
        f"kiq soak: {result['minutes']:.0f} min, lost {result['lost']['total']} "
        "(red: Redis restart, orange: kill -9, purple: maxmemory)"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return True


def write(result: dict[str, Any], directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / time.strftime("soak-%Y%m%d-%H%M%S", time.gmtime())
    paths = [stem.with_suffix(".json"), stem.with_suffix(".md")]
    paths[0].write_text(json.dumps(result, indent=1))
    paths[1].write_text(summary(result) + "\n")
    if plot(result, stem.with_suffix(".png")):
        paths.append(stem.with_suffix(".png"))
    return paths
