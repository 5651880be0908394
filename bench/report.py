"""The results as a Markdown table (absolute numbers and ratios to Ruby Sidekiq), a PNG plot, and JSON.
The I/O-bound drain's (``run["kind"] == "io"``): ratios to the best peer instead, the ceiling its concurrency
allows, and the issue's targets."""

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
    ("load_p50_ms", "latency p50 at {load}", "ms", False),  # {load}: the run's load rate (header_for)
    ("load_p99_ms", "latency p99 at {load}", "ms", False),
    ("peak_rss_mib", "peak RSS", "MiB", False),
]

# the I/O drain's: (key, header, unit, higher is better)
IO_METRICS: list[tuple[str, str, str, bool]] = [
    ("drain_rate", "I/O drain", "jobs/s", True),
    ("cpu_us_per_job", "worker CPU per job", "µs", False),
    ("push_bulk_rate", "push bulk", "jobs/s", True),
    ("peak_rss_mib", "peak RSS", "MiB", False),
]
IO_TARGET_RATIO = 3.0  # kiq async ≥ 3x the best peer, per process
IO_TARGET_RATE = 5_000.0  # ≥ 5,000 I/O jobs/s in one worker process


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def header_for(header: str, load_rate: float | None) -> str:
    """A metric's header with the run's load rate in it (a run saved before the load phase had none)."""
    return header.replace("{load}", f"{load_rate:,.0f}/s" if load_rate else "load")


def cell(value: float | None, baseline: float | None) -> str:
    if value is None:
        return "-"
    if not baseline:
        return _number(value)
    return f"{_number(value)} ({value / baseline:.2f}x)"


def table(results: list[dict[str, Any]], baseline: str = BASELINE, load_rate: float | None = None) -> str:
    """Markdown: one row per system; each number with its ratio to the baseline system's (when it ran)."""
    base = next((r for r in results if r["system"] == baseline and not r.get("error")), None)
    headers = ["system", "version", "concurrency"]
    headers += [
        f"{header_for(header, load_rate)} ({unit}, {'higher' if up else 'lower'} is better)"
        for _, header, unit, up in METRICS
    ]
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
    return render_table(rows, notes)


def render_table(rows: list[list[str]], notes: list[str]) -> str:
    """A Markdown table (``rows[0]`` the header, ``rows[1]`` its rule), then the notes as a list."""
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    if notes:
        lines += ["", *[f"- {note}" for note in notes]]
    return "\n".join(lines) + "\n"


def machine_lines(run: dict[str, Any]) -> str:
    lines = [f"- command: `{run['command']}`", f"- date: {run['date']}"]
    lines += [f"- {key}: {value}" for key, value in run["machine"].items()]
    return "\n".join(lines) + "\n"


def print_and_save(run: dict[str, Any], text: str, json_path: Path | None) -> None:
    """Print a run's report (``text``, then the run's machine lines); write its figures to ``json_path`` if given."""
    print()
    print(f"{text}\n{machine_lines(run)}")
    if json_path:
        json_path.write_text(json.dumps(run, indent=2) + "\n")


def markdown(run: dict[str, Any]) -> str:
    if run.get("kind") == "io":
        return f"{io_table(run)}\n{io_targets(run)}\n{machine_lines(run)}"
    return f"{table(run['results'], load_rate=run['settings'].get('load_rate'))}\n{machine_lines(run)}"


def _is_kiq(result: dict[str, Any]) -> bool:
    return str(result["system"]).startswith("kiq")


def best_peer(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The peer (not kiq) with the highest I/O drain rate, among those without an error."""
    peers = [r for r in results if not _is_kiq(r) and not r.get("error") and r.get("drain_rate")]
    return max(peers, key=lambda r: r["drain_rate"], default=None)


def ceiling(result: dict[str, Any], seconds: float) -> float | None:
    """The most jobs/s a worker awaiting ``in_flight`` jobs of ``seconds`` each can finish (Little's law)."""
    return result["in_flight"] / seconds if result.get("in_flight") else None


def io_table(run: dict[str, Any]) -> str:
    """Markdown: a row per system; the drain's ratio to the best peer and the share of its ceiling it reached."""
    results, seconds = run["results"], run["settings"]["io_seconds"]
    best = best_peer(results)
    headers = ["system", "version", "in flight"]
    headers += [f"{header} ({unit}, {'higher' if up else 'lower'} is better)" for _, header, unit, up in IO_METRICS]
    headers.insert(4, "vs best peer")
    headers.insert(5, f"of the ceiling (in flight / {seconds * 1000:g} ms)")
    rows = [headers, ["---"] * len(headers)]
    notes: list[str] = []
    for result in results:
        row = [result["label"], result.get("version") or "?", result.get("concurrency", "")]
        if result.get("error"):
            rows.append(row + ["error"] * (len(headers) - len(row)))
            notes.append(f"{result['label']}: {result['error']}")
            continue
        row += [cell(result.get(key), None) for key, *_ in IO_METRICS]
        rate, top = result.get("drain_rate"), ceiling(result, seconds)
        row.insert(4, f"{rate / best['drain_rate']:.2f}x" if rate and best else "-")
        row.insert(5, f"{rate / top:.0%} of {top:,.0f}" if rate and top else "-")
        rows.append(row)
        notes += [f"{result['label']}: {note}" for note in result.get("notes", [])]
    return render_table(rows, notes)


def io_targets(run: dict[str, Any]) -> str:
    """The issue's two targets, against kiq at the run's concurrency (``kiq_io``)."""
    results = run["results"]
    kiq = next((r for r in results if r["system"] == "kiq_io" and not r.get("error")), None)
    best = best_peer(results)
    if kiq is None or best is None:
        return "- targets: not assessed (kiq async at the run's concurrency or every peer is missing)\n"
    ratio = kiq["drain_rate"] / best["drain_rate"]
    lines = [
        "| target | result |",
        "| --- | --- |",
        f"| kiq async ≥ {IO_TARGET_RATIO:g}x the best peer per process | {kiq['drain_rate']:,.0f} / "
        f"{best['drain_rate']:,.0f} ({best['label']}) = **{ratio:.2f}x**: {_met(ratio >= IO_TARGET_RATIO)} |",
        f"| ≥ {IO_TARGET_RATE:,.0f} I/O jobs/s in one worker process | kiq async **{kiq['drain_rate']:,.0f}** jobs/s: "
        f"{_met(kiq['drain_rate'] >= IO_TARGET_RATE)} |",
    ]
    return "\n".join(lines) + "\n"


def _met(met: bool) -> str:
    return "met" if met else "**not met**"


def plot(run: dict[str, Any], path: Path) -> bool:
    """One horizontal bar chart per metric; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    if run.get("kind") == "io":
        _plot_io(run, path, plt)
        return True
    results = [r for r in run["results"] if not r.get("error")]
    figure, axes = plt.subplots(2, 4, figsize=(21, 9))
    load_rate = run["settings"].get("load_rate")
    for axis, (key, header, unit, higher) in zip(axes.flat, METRICS, strict=True):
        header = header_for(header, load_rate)
        shown = [r for r in results if r.get(key) is not None]
        labels = [r["label"] for r in shown]
        values = [float(r[key]) for r in shown]
        colors = [_color(r["system"]) for r in shown]
        axis.barh(labels, values, color=colors)
        axis.invert_yaxis()
        if unit == "ms" and values:
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


def _plot_io(run: dict[str, Any], path: Path, plt: Any) -> None:
    """The I/O drain's rates as bars, each with its ceiling (in flight / job duration) as a tick."""
    results = [r for r in run["results"] if not r.get("error") and r.get("drain_rate")]
    seconds = run["settings"]["io_seconds"]
    figure, axis = plt.subplots(figsize=(10, 1.2 + 0.6 * len(results)))
    labels = [f"{r['label']}\n{r['in_flight']:,} in flight" for r in results]
    values = [float(r["drain_rate"]) for r in results]
    axis.barh(labels, values, color=[_color(r["system"]) for r in results])
    for index, result in enumerate(results):
        axis.text(values[index], index, " " + _number(values[index]), va="center", fontsize=8)
        top = ceiling(result, seconds)
        if top:
            axis.plot([top, top], [index - 0.4, index + 0.4], color="black", linestyle=":")
    axis.invert_yaxis()
    axis.xaxis.set_major_formatter(lambda x, _: f"{x / 1000:g}k" if x >= 1000 else f"{x:g}")
    axis.set_title(
        f"{run['settings']['jobs']:,} jobs that each await {seconds * 1000:g} ms, one worker process - "
        f"{run['machine']['cpu']}\njobs/s, higher is better; dotted: the ceiling (in flight / job duration)",
        fontsize=9,
    )
    axis.tick_params(axis="y", labelsize=8)
    axis.margins(x=0.15)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


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
