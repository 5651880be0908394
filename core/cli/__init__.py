"""The ``kiq`` command line: ``kiq worker`` runs jobs (cli.worker); ``kiq embedded`` manages the embedded server; the
inspection commands come from cli.inspection, ``kiq busy`` and ``kiq cancel`` from cli.iteration, ``kiq settings``
from cli.settings_command; installed plugins add theirs (the ``kiq_cli`` hook).

Hand-written on argparse (the standard library) on purpose: a CLI framework (click, typer) or a table library
(rich) would add dependencies to every installation for a few tables and flags.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
from collections.abc import Sequence

from ..config import Config
from ..embedded import EmbeddedRedis
from ..errors import KiqError
from ..plugin_manager import PluginManager, installed_plugins
from ..settings import plugin_settings
from ..version import __version__
from . import inspection, iteration, worker
from .settings_command import add_settings_command, without_password

log = logging.getLogger("kiq")


def build_parser(plugins: PluginManager | None = None) -> argparse.ArgumentParser:
    """The ``kiq`` parser, with the commands of ``plugins`` (default: the installed ones, see
    ``installed_plugin_manager``)."""
    parser = argparse.ArgumentParser(prog="kiq", description="Redis-backed background jobs, Sidekiq-compatible.")
    parser.add_argument("--version", action="version", version=f"kiq {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    plugins = plugins or installed_plugin_manager()
    worker.add_worker_command(commands, plugins)

    embedded = commands.add_parser(
        "embedded",
        aliases=["redis"],  # its name up to 0.1
        help="status, start or stop of the embedded (development) Redis server",
        description="The embedded Redis that kiq starts in embedded_dir when redis_url is not set. status prints "
        "its URL (exit 1 when it is not running); start starts it; stop shuts it down, saving its data.",
    )
    embedded.add_argument("action", nargs="?", choices=("status", "start", "stop"), default="status")
    embedded.add_argument("-C", "--config", help="config file (default: kiq.toml or [tool.kiq] in pyproject.toml)")
    embedded.add_argument("--stop", action="store_true", help=argparse.SUPPRESS)  # `kiq redis --stop` up to 0.1
    embedded.set_defaults(run=run_embedded)
    inspection.add_commands(commands)
    iteration.add_commands(commands)
    add_settings_command(commands)
    plugins.hook.kiq_cli(commands=commands)
    return parser


def installed_plugin_manager() -> PluginManager:
    """Every installed plugin, which may add commands (``kiq tracking ...``) and settings (``kiq_settings_source``);
    one that fails to load (e.g. ``otel`` without its extra) is skipped quietly (a DEBUG line), so a missing optional
    dependency does not break or clutter ``kiq``: a plugin the settings name is loaded again with the config, and
    there its failure is an error (``kiq.plugin_manager.resolve``)."""
    plugins = PluginManager(None)
    for name, entry_point in installed_plugins().items():
        try:
            plugins.add(entry_point.load(), name)
        except Exception as exc:
            log.debug("plugin %s is installed but cannot be loaded: %s", name, exc)
    return plugins


def run_embedded(args: argparse.Namespace) -> int:
    config = Config.load(args.config)
    server = EmbeddedRedis(config.embedded_dir)
    action = "stop" if args.stop else args.action
    if config.redis_url is not None and action != "stop":  # stopping a leftover one still makes sense
        print(f"redis_url is set ({without_password(config.redis_url)}); the embedded server is not used")
        return 0
    if action == "stop":
        print(f"stopped the embedded Redis in {server.dir}" if server.stop() else f"not running in {server.dir}")
        return 0
    if action == "start":
        print(server.ensure_running())
        return 0
    url = server.running_url()
    print(url if url is not None else f"not running in {server.dir}")
    return 0 if url is not None else 1


def main(argv: Sequence[str] | None = None) -> int:
    # the project's own modules (plugins, -r job modules, a config's imports) are found from the project root, as
    # with ``python -m``, before any setting is read
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for stream in (sys.stdout, sys.stderr):  # a payload that is not UTF-8 prints as \\xff escapes, not a crash
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    plugins = installed_plugin_manager()
    parser = build_parser(plugins)
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        # e.g. settings.KIQ of a Django project (DJANGO_SETTINGS_MODULE), between the config file and the environment
        with plugin_settings(plugins.settings_sources()):
            code: int = args.run(args)
    except KiqError as exc:
        print(f"kiq: error: {exc}", file=sys.stderr)
        return 2
    return code
