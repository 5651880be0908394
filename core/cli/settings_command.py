"""``kiq settings``: every setting the config knows (core, and those of the plugins it loads) with its current
value (defaults < config file < ``KIQ_*`` environment) and its help. Where a value came from is not tracked."""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..config import Config
from .output import print_json, print_table


def add_settings_command(commands: argparse._SubParsersAction[Any]) -> None:
    parser = commands.add_parser(
        "settings",
        help="every setting with its current value and help",
        description="Every setting (core and the configured plugins') with its value from the defaults, the config "
        "file and KIQ_* environment variables.",
    )
    parser.add_argument("-C", "--config", help="config file (default: kiq.toml or [tool.kiq] in pyproject.toml)")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")
    parser.set_defaults(run=run_settings)


def run_settings(args: argparse.Namespace) -> int:
    config = Config.load(args.config)
    listed = [
        {
            "name": setting.name,
            "value": as_written(setting.name, config.get(setting.name)),
            "default": as_written(setting.name, setting.default),
            "help": setting.help,
        }
        for setting in config.describe_settings()
    ]
    if args.json:
        return print_json(listed)
    print_table(["SETTING", "VALUE", "HELP"], [[item["name"], shown(item["value"]), item["help"]] for item in listed])
    return 0


def as_written(name: str, value: Any) -> Any:
    """A value as one would write it in ``kiq.toml``: queues as ``"name,weight"``; a URL (``redis_url``, a
    plugin's database URL) without its password; a plugin's setting parsed into an object as its ``str()``."""
    if name == "queues":
        return [f"{queue},{weight}" if weight else queue for queue, weight in value]
    if isinstance(value, str) and "://" in value:
        return without_password(value)
    if value is not None and not isinstance(value, (str, int, float, bool, list, dict)):
        return str(value)  # a value parsed into an object says itself what to show (a key ring: no key)
    return value


def shown(value: Any) -> str:
    if value is None:
        return "(unset)"
    return value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))


def without_password(url: str) -> str:
    """``redis://:***@host/0``: the settings list is for reading over a shoulder or pasting into an issue."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL after all (e.g. a bad port): shown as it is
        return url
    if password is None:
        return url
    user, _, host = parts.netloc.rpartition("@")
    name = user.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{name}:***@{host}"))
