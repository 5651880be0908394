"""The results as a Markdown table (absolute numbers and ratios to Ruby Sidekiq), a PNG plot, and JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.systems import BASELINE

# (key, header, unit, higher is better)
METRICS: list[tuple[str, str, str, bool]] = [
    ("drain_rate", "drain", "jobs/s", True),
    ("push_bulk_rate", "push bulk", "jobs/s", True),
    ("push_single_rate", "push single", "jobs/s", True),
    ("latency_p50_ms", "latency p50", "ms", False),
    ("latency_p99_ms", "latency p99", "ms", False),
    ("peak_rss_mib", "peak RSS", "MiB", False),
]


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell(value: float | None, baseline: float | None) -> str:
    if value is None:
        return "-"
    if not baseline:
        return _number(value)
    return f"{_number(value)} ({value / baseline:.2f}x)"


def table(results: list[dict[str, Any]], baseline: str = BASELINE) -> str:
    """Markdown: one row per system; each number with its ratio to the baseline system's (when it ran)."""
    base = next((r for r in results if r["system"] == baseline and not r.get("error")), None)
    headers = ["system", "version", "concurrency"]
    headers += [f"{header} ({unit}, {'higher' if up else 'lower'} is better)" for _, header, unit, up in METRICS]
    rows = [headers, ["---"] * len(headers)]
    notes: list[str] = []
    for result in results:
        row = [result["label"], result.get("version") or "?", result.get("concurrency", "")]
        if result.get("error"):
            row += ["error"] * len(METRICS)
            notes.append(f"{result['label']}: {result['error']}")
        else:
            row += [cell(result.get(key), base.get(key) if base else None) for key, *_ in METRICS]
            notes += [f"{result['label']}: {note}" for note in result.get("notes", [])]
        rows.append(row)
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    if notes:
        lines += ["", *[f"- {note}" for note in notes]]
    return "\n".join(lines) + "\n"


def machine_lines(run: dict[str, Any]) -> str:
    lines = [f"- command: `{run['command']}`", f"- date: {run['date']}"]
    lines += [f"- {key}: {value}" for key, value in run["machine"].items()]
    return "\n".join(lines) + "\n"


def markdown(run: dict[str, Any]) -> str:
    return f"{table(run['results'])}\n{machine_lines(run)}"


def plot(run: dict[str, Any], path: Path) -> bool:
    """One horizontal bar chart per metric; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    results = [r for r in run["results"] if not r.get("error")]
    figure, axes = plt.subplots(2, 3, figsize=(16, 9))
    for axis, (key, header, unit, higher) in zip(axes.flat, METRICS, strict=True):
        shown = [r for r in results if r.get(key) is not None]
        labels = [r["label"] for r in shown]
        values = [float(r[key]) for r in shown]
        colors = [_color(r["system"]) for r in shown]
        axis.barh(labels, values, color=colors)
        axis.invert_yaxis()
        if unit == "ms":
            axis.set_xscale("log")  # latencies span 0.3 ms to 500 ms
        else:
            axis.xaxis.set_major_formatter(lambda x, _: f"{x / 1000:g}k" if x >= 1000 else f"{x:g}")
        axis.set_title(f"{header} ({unit}, {'higher' if higher else 'lower'} is better)")
        axis.tick_params(axis="y", labelsize=8)
        for index, value in enumerate(values):
            axis.text(value, index, " " + _number(value), va="center", fontsize=7)
        axis.margins(x=0.25)
    figure.suptitle(f"kiq benchmark, {run['settings']['jobs']:,} no-op jobs per drain - {run['machine']['cpu']}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def _color(system: str) -> str:
    if system == BASELINE:
        return "#c0392b"
    return "#2471a3" if system.startswith("kiq") else "#7f8c8d"


def save(run: dict[str, Any], out_dir: Path, stem: str, log: Callable[[str], None] = print) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(run, indent=2) + "\n")
    (out_dir / f"{stem}.md").write_text(markdown(run))
    log(f"wrote {out_dir / stem}.json and .md")
    if plot(run, out_dir / f"{stem}.png"):
        log(f"wrote {out_dir / stem}.png")
    else:
        log("matplotlib is not installed here: no plot (it is in bench/requirements.txt)")
