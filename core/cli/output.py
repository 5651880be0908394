"""What the inspection commands share, kiq's and plugins' (``kiq periodic``, ``kiq limiters``): their common options,
the Redis they look at, and what they print: aligned tables for people, JSON for scripts, times with their zone.
The one module of ``kiq.cli`` that plugins use (an import contract allows it)."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..config import Config
from ..embedded import EmbeddedRedis
from ..errors import KiqError


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


MAX_CELL = 100  # characters of a table cell: a 100 KB queue name another producer wrote is cut, not padded to


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """``rows`` aligned under ``headers``; each cell printable and at most ``MAX_CELL`` characters, so one huge value
    cannot pad every line of the table to its width."""
    if not rows:
        print("(none)")
        return
    cells = [list(headers), *[[cut(printable(str(cell)), MAX_CELL) for cell in row] for row in rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def printable(text: str) -> str:
    """``text`` with what a terminal must not be sent escaped: control characters (an escape sequence in a queue
    name another producer wrote, a NUL) and the lone surrogates that stand for bytes that are not UTF-8."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escaped(char) for char in text)


def _escaped(char: str) -> str:
    if "\udc80" <= char <= "\udcff":  # a byte that is not UTF-8, as surrogateescape decoded it: show the byte
        return f"\\x{ord(char) - 0xDC00:02x}"
    return char.encode("unicode_escape").decode()


def short(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    return cut(" ".join(text.split()), limit)


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis saying so."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def names(items: Sequence[str], limit: int = 20, width: int = 60) -> str:
    """Names for a message: the first ``limit``, each printable and cut to ``width``, then how many more."""
    shown = ", ".join(repr(cut(printable(name), width)) for name in items[:limit]) or "none"
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit:,} more"


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


def inspection_options() -> argparse.ArgumentParser:
    """The options every inspection command takes (``parents=[inspection_options()]``): ``-C FILE``,
    ``--redis-url URL``, ``--json``, ``--utc``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-C", "--config", help="config file (default: kiq.toml or [tool.kiq] in pyproject.toml)")
    common.add_argument(
        "--redis-url", help="Redis to inspect (default: the redis_url setting, else the embedded Redis if it runs)"
    )
    common.add_argument("--shard", metavar="NAME", help="look at this shard (a name in the shards setting)")
    common.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")
    common.add_argument("--utc", action="store_true", help="show times in UTC (default: local time, with its zone)")
    return common


def inspected_config(args: argparse.Namespace) -> Config:
    """The settings, with the Redis to inspect: ``--redis-url``, else the ``redis_url`` setting, else the embedded
    server if it runs. Never a new embedded server: started in whatever directory the command was run from, it
    would be empty, and the command would report zeros instead of saying it looks at the wrong place."""
    overrides = {"redis_url": args.redis_url} if args.redis_url else {}
    config = Config.load(args.config, **overrides)
    if getattr(args, "shard", None):
        return config.for_shard(args.shard)
    if config.redis_url is None:
        server = EmbeddedRedis(config.embedded_dir)
        url = server.running_url()
        if url is None:
            raise KiqError(
                f"no Redis to inspect: redis_url is not set and no embedded Redis is running in {server.dir}; "
                "give --redis-url URL or set KIQ_REDIS_URL, or run kiq from the project directory (where kiq worker "
                "started the embedded one)"
            )
        config.redis_url = url
    return config
