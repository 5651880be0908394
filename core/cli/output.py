"""What the CLI commands print: aligned tables for people, JSON for scripts, and times with their zone."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Sequence
from typing import Any


def report(args: argparse.Namespace, result: dict[str, Any], message: str) -> int:
    """The outcome of an action: ``{"ok": true, **result}`` with ``--json``, else ``message``."""
    if args.json:
        return print_json({"ok": True, **result})
    print(message)
    return 0


def print_json(data: Any) -> int:
    json.dump(data, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if not rows:
        print("(none)")
        return
    cells = [list(headers), *[[str(cell) for cell in row] for row in rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def short(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


TIME_UNITS = (("d", 86400), ("h", 3600), ("m", 60))


def duration(seconds: float) -> str:
    """``35s``, ``3m``, ``2h``, ``4d``: the largest whole unit."""
    seconds = abs(seconds)
    unit, size = next(((unit, size) for unit, size in TIME_UNITS if seconds >= size), ("s", 1))
    return f"{int(seconds // size)}{unit}"


def ago(timestamp: float) -> str:
    """``12s ago`` / ``in 3m``."""
    delta = time.time() - timestamp
    return f"{duration(delta)} ago" if delta >= 0 else f"in {duration(delta)}"


def when(timestamp: float, utc: bool = False) -> str:
    """``2026-11-23 09:05:00 CET (in 59m)``: local time (the machine's ``TZ``) with its zone, or UTC, so a time
    read off one machine means the same on another."""
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    if not utc:
        moment = moment.astimezone()
    return f"{moment.strftime('%Y-%m-%d %H:%M:%S %Z')} ({ago(timestamp)})"
