"""The ``kiq`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__, cli_inspect
from .config import Config
from .errors import KiqError
from .redis import EmbeddedRedis


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kiq", description="Redis-backed background jobs, Sidekiq-compatible.")
    parser.add_argument("--version", action="version", version=f"kiq {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    embedded = commands.add_parser("redis", help="show (starting if needed) or stop the embedded Redis server")
    embedded.add_argument("-C", "--config", help="config file (default: kiq.toml or [tool.kiq] in pyproject.toml)")
    embedded.add_argument("--stop", action="store_true", help="stop the embedded server")
    embedded.set_defaults(run=run_redis)
    cli_inspect.add_commands(commands)
    return parser


def run_redis(args: argparse.Namespace) -> int:
    config = Config.load(args.config)
    if config.redis_url is not None:
        print(f"redis_url is set ({config.redis_url}); the embedded server is not used")
        return 0
    server = EmbeddedRedis(config.embedded_dir)
    if args.stop:
        print("stopped" if server.stop() else "not running")
    else:
        print(server.ensure_running())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        code: int = args.run(args)
    except KiqError as exc:
        print(f"kiq: error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
