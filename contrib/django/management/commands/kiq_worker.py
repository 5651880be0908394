"""``python manage.py kiq_worker -r myapp.jobs ...``: ``kiq worker`` with Django set up and ``settings.KIQ`` read.

It takes ``kiq worker``'s own flags (``-r``, ``-q``, ``-c``, ``-t``, ``--fetch``, ...; ``--help`` lists them), so
Django's parser is bypassed: it would refuse them, and its ``-v`` means something else than kiq's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError, CommandParser

import kiq
import kiq.cli

from ...config import apply_settings
from ..arguments import without_django_options


class Command(BaseCommand):
    help = "Run a kiq worker with Django set up; takes the flags of `kiq worker` (see --help)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("worker_args", nargs="*", help="flags of `kiq worker`, for call_command")

    def run_from_argv(self, argv: list[str]) -> NoReturn:
        sys.exit(run_worker(without_django_options(argv[2:])))

    def handle(self, *args: Any, **options: Any) -> None:
        code = run_worker(options["worker_args"])
        if code:
            raise CommandError(f"kiq worker exited with status {code}", returncode=code)


def run_worker(args: Sequence[str]) -> int:
    """``kiq worker args``, with ``settings.KIQ`` laid over the worker's config under the settings its flags set."""
    flagged = _flagged_settings(args)
    kiq.configure_server(lambda config: apply_settings(config, keep=flagged))
    return kiq.cli.main(["worker", *args])


def _flagged_settings(args: Sequence[str]) -> set[str]:
    """The settings the flags in ``args`` set (they win over ``settings.KIQ``): the worker's parser says which."""
    parsed = vars(kiq.cli.build_parser().parse_args(["worker", *args]))
    flagged = {name for name, value in parsed.items() if value is not None and value is not False}
    return flagged | ({"log_level"} if parsed.get("verbose") else set())  # -v sets log_level
