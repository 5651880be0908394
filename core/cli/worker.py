"""``kiq worker``: load the settings, import the jobs, run a Launcher, and turn signals into its actions.

Signal handlers do no work: the C-level handler writes the signal number into a pipe (``signal.set_wakeup_fd``)
and the main thread reads it and acts (Launcher.handle_signal); remote signals from the heartbeat are written into
the same pipe.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import select
import signal
import sys
from pathlib import Path
from typing import Any

from ..config import Config, enter_server_mode
from ..errors import ConfigError
from ..job_registry import registry
from ..logging import setup_logging
from ..server.launcher import WORKER_SIGNALS, Launcher
from ..version import __version__

log = logging.getLogger("kiq")


def add_worker_command(commands: argparse._SubParsersAction[Any]) -> None:
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
        "-a", "--async-concurrency", type=int, help="async jobs each capsule's event loop awaits at once (default 200)"
    )
    worker.add_argument("-t", "--timeout", type=float, help="seconds a stop waits for running jobs (default 25)")
    worker.add_argument("--fetch", help="fetch strategy: basic, reliable, a plugin's name or module:Class")
    worker.add_argument(
        "--plugins",
        action="append",
        metavar="NAME[,NAME]",
        help="plugins to load (entry point names or module[:attr]); repeatable; replaces the plugins setting",
    )
    worker.add_argument("-C", "--config", help="config file (default: kiq.toml or [tool.kiq] in pyproject.toml)")
    worker.add_argument("--redis-url", help="Redis URL (default: the embedded server in ./.kiq)")
    worker.add_argument("--tag", help="a tag shown with this process in the process list")
    worker.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    worker.add_argument("--log-format", choices=("plain", "json"), help="log lines as text (default) or JSON")
    worker.set_defaults(run=run_worker)  # fmt: skip


def worker_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags (only those given, so the environment and the file fill the rest)."""
    flags = {
        "require": args.require,
        "queues": args.queues,
        "concurrency": args.concurrency,
        "async_concurrency": args.async_concurrency,
        "timeout": args.timeout,
        "fetch": args.fetch,
        "plugins": [name for names in args.plugins for name in names.split(",") if name] if args.plugins else None,
        "redis_url": args.redis_url,
        "tag": args.tag,
        "log_level": "DEBUG" if args.verbose else None,
        "log_format": args.log_format,
    }
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
    with SignalPipe() as signals:
        launcher = Launcher(config, signal_sink=signals.send)
        log.info(
            "kiq %s starting: identity=%s concurrency=%d queues=%s fetch=%s redis=%s jobs=%d",
            __version__, launcher.identity, config.concurrency,
            ",".join(f"{name},{weight}" if weight else name for name, weight in config.queues),
            config.fetch, config.redis_url or f"embedded ({config.embedded_dir})", len(registry.names()),
        )  # fmt: skip
        launcher.run()
        while not launcher.done.is_set():
            for name in signals.wait(timeout=0.2):
                log.info("got %s", name)
                launcher.handle_signal(name)
        return 0


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


class SignalPipe:
    """The self-pipe: the C-level handler writes the signal number into a pipe (``signal.set_wakeup_fd``) and
    the main thread reads it and acts, so no work runs inside a signal handler. Remote signals from the
    heartbeat are written into the same pipe."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        for fd in (self.read_fd, self.write_fd):
            os.set_blocking(fd, False)
        self._previous: dict[int, Any] = {}
        self._previous_wakeup = -1

    def __enter__(self) -> SignalPipe:
        self._previous_wakeup = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        for name in WORKER_SIGNALS:
            signum = getattr(signal, f"SIG{name}", None)
            if signum is not None:
                self._previous[signum] = signal.signal(signum, _ignore)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self._previous_wakeup)
        os.close(self.read_fd)
        os.close(self.write_fd)

    def send(self, name: str) -> None:
        """Deliver a signal by name (from another thread), as if the process had received it."""
        signum = getattr(signal, f"SIG{name}", None)
        if name not in WORKER_SIGNALS or signum is None:
            log.warning("ignoring unknown signal %r", name)
            return
        try:
            os.write(self.write_fd, bytes([signum]))
        except BlockingIOError:
            log.warning("signal pipe full; dropped %s", name)

    def wait(self, timeout: float | None = None) -> list[str]:
        """Block until signals arrive (at most ``timeout`` s); their names in order."""
        select.select([self.read_fd], [], [], timeout)
        try:
            data = os.read(self.read_fd, 64)
        except BlockingIOError:
            return []
        return [signal.Signals(signum).name[3:] for signum in data if signum in self._previous]


def _ignore(signum: int, frame: object) -> None:
    """The Python-level handler: nothing to do, the wakeup fd already carries the signal to the main loop."""
