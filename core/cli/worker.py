"""``kiq worker``: load the settings, import the jobs, then run one worker process (kiq.server.swarm.serve) or a
swarm of them (``-p N``, kiq.server.swarm.Swarm)."""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

from ..config import Config, enter_server_mode
from ..errors import ConfigError
from ..job_registry import registry
from ..logging import setup_logging
from ..plugin_manager import PluginManager
from ..server.swarm import Swarm, serve

log = logging.getLogger("kiq")


PLUGIN_OPTIONS = "plugins' options"  # the group of the options plugins add (kiq_worker_options)


def add_worker_command(commands: argparse._SubParsersAction[Any], plugins: PluginManager) -> None:
    worker = commands.add_parser(
        "worker",
        help="run jobs from the queues",
        description="Run jobs. Flags override KIQ_* environment variables, which override the config file.",
    )
    worker.add_argument(
        "-r",
        "--require",
        action="append",
        metavar="MODULE_OR_PATH",
        help="module (myapp.jobs) or file (myapp/jobs.py) defining the jobs; repeatable",
    )
    worker.add_argument(
        "-q",
        "--queue",
        action="append",
        dest="queues",
        metavar="NAME[,WEIGHT]",
        help="queue to fetch from, with an optional weight; repeatable, in priority order",
    )
    worker.add_argument("-c", "--concurrency", type=int, help="processor threads (default 10)")
    worker.add_argument(
        "-p", "--processes", help="worker processes to fork (a swarm); 0 or auto: one per core (default 1)"
    )
    worker.add_argument(
        "-a", "--async-concurrency", type=int, help="async jobs each capsule's event loop awaits at once (default 200)"
    )
    worker.add_argument(
        "-t",
        "--timeout",
        type=float,
        help="seconds a stop waits for running jobs before requeueing them; exit within this + 2 s (default 25)",
    )
    worker.add_argument("--fetch", help="fetch strategy: basic, reliable, a plugin's name or module:Class")
    worker.add_argument(
        "--plugins",
        action="append",
        metavar="NAME[,NAME]",
        help="plugins to load (entry point names or module[:attr]); repeatable; replaces the plugins setting",
    )
    worker.add_argument("-C", "--config", help="config file (default: kiq.toml or [tool.kiq] in pyproject.toml)")
    worker.add_argument("--redis-url", help="Redis URL (default: the embedded server in ./.kiq)")
    worker.add_argument(
        "--shard",
        action="append",
        metavar="NAME",
        help="serve this shard (a name in the shards setting) instead of redis_url; repeatable: -p workers each",
    )
    worker.add_argument("--tag", help="a tag shown with this process in the process list")
    worker.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    worker.add_argument("--log-format", choices=("plain", "json"), help="log lines as text (default) or JSON")
    options = worker.add_argument_group(PLUGIN_OPTIONS)
    plugins.hook.kiq_worker_options(options=options)
    # their values override the settings their dests name, when given (worker_overrides)
    worker.set_defaults(run=run_worker, plugin_options=[action.dest for action in options._group_actions])


def worker_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags (only those given, so the environment and the file fill the rest)."""
    flags = {
        "require": args.require,
        "queues": args.queues,
        "concurrency": args.concurrency,
        "async_concurrency": args.async_concurrency,
        "processes": args.processes,
        "timeout": args.timeout,
        "fetch": args.fetch,
        "plugins": [name for names in args.plugins for name in names.split(",") if name] if args.plugins else None,
        "redis_url": args.redis_url,
        "tag": args.tag,
        "log_level": "DEBUG" if args.verbose else None,
        "log_format": args.log_format,
    }
    flags.update({dest: getattr(args, dest, None) for dest in getattr(args, "plugin_options", ())})
    return {name: value for name, value in flags.items() if value is not None}


def run_worker(args: argparse.Namespace) -> int:
    config = Config.load(args.config, **worker_overrides(args))
    setup_logging(config.log_level, config.log_format)
    enter_server_mode(config)  # before the imports, so their configure_server callbacks run on this config
    if not config.require:
        raise ConfigError("nothing to run: name the modules that define your jobs with -r MODULE (or require)")
    import_required(config.require)
    if not registry.names():
        raise ConfigError(
            f"no jobs are registered after importing {', '.join(config.require)}: -r must name the modules "
            "that define the jobs (kiq.Job subclasses or @kiq.job functions)"
        )
    setup_logging(config.log_level, config.log_format)  # a configure_server callback may have changed them
    processes = config.processes or os.cpu_count() or 1
    shards = list(dict.fromkeys(args.shard or []))
    for name in shards:
        config.shard_url(name)  # an unknown name stops the start here, with the known ones
    if processes > 1 or len(shards) > 1 or config.max_memory_mb:  # a memory limit needs a parent to replace workers
        code = Swarm(config, processes, shards or [None]).run()
    else:
        if shards:
            config.redis_url = config.shard_url(shards[0])
        code = serve(config)
    # The process exits next. The interpreter's last garbage collection walks every object a worker has made (0.1 s
    # idle, 0.5 s on a busy machine: measured on a swarm parent), time the stop promise (timeout + 2 s) does not
    # have; frozen objects are skipped, and the atexit handlers (an exporter's flush) still run before it.
    gc.freeze()
    return code


def import_required(names: list[str]) -> None:
    """Import what ``-r`` names: a module (``myapp.jobs``), a ``.py`` file or a package directory.

    The current directory goes first on ``sys.path`` (as with Celery), so ``-r myapp.jobs`` works from the
    project root.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    for name in names:
        module_name = _module_name(name, Path(cwd))
        try:
            importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
                raise ConfigError(
                    f"-r {name}: there is no module {module_name!r} (searched {cwd} and sys.path)"
                ) from exc
            log.exception("importing %s failed", name)
            raise ConfigError(f"-r {name}: importing it failed: {exc}") from exc
        except Exception as exc:
            log.exception("importing %s failed", name)
            raise ConfigError(f"-r {name}: importing it failed: {type(exc).__name__}: {exc}") from exc


def _module_name(name: str, cwd: Path) -> str:
    """``pkg/jobs.py`` or ``pkg/`` → ``pkg.jobs`` / ``pkg`` (relative to ``cwd``, else its own directory goes on
    ``sys.path``); anything else is taken as a module name."""
    path = Path(name)
    if not (name.endswith(".py") or os.sep in name or path.is_dir()):
        return name
    if not path.exists():
        raise ConfigError(f"-r {name}: no such file or directory")
    path = path.resolve()
    if path.suffix == ".py":
        path = path.parent if path.stem == "__init__" else path.with_suffix("")
    try:
        parts = path.relative_to(cwd.resolve()).parts
    except ValueError:
        sys.path.insert(0, str(path.parent))
        parts = (path.name,)
    if not parts:
        raise ConfigError(f"-r {name}: name a module, file or package directory, not the project root")
    return ".".join(parts)
