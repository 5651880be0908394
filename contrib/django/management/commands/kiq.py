"""``python manage.py kiq <command> ...``: the ``kiq`` command line (``stats``, ``queues``, ``retries``, ``dead``,
``scheduled``, ``processes``, ``worker``, ``web``, and the installed plugins' ``periodic``, ``batches``, ...) with
Django set up and ``settings.KIQ`` read, between the config file and the ``KIQ_*`` environment.

It is ``kiq`` itself (``kiq.cli.main``), so every command and flag is there (``manage.py kiq --help``); manage.py
has set ``DJANGO_SETTINGS_MODULE``, which makes kiq read ``settings.KIQ`` (``kiq.contrib.django_settings``).
Django's parser is bypassed: it would refuse kiq's flags.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError, CommandParser

import kiq.cli

from ..arguments import without_django_options


class Command(BaseCommand):
    help = "The kiq command line with Django set up and settings.KIQ read: manage.py kiq stats, worker, web, ..."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kiq_args", nargs="*", help="a kiq command and its flags, for call_command")

    def run_from_argv(self, argv: list[str]) -> NoReturn:
        sys.exit(kiq.cli.main(without_django_options(argv[2:])))

    def handle(self, *args: Any, **options: Any) -> None:
        code = kiq.cli.main(options["kiq_args"])
        if code:
            raise CommandError(f"kiq {' '.join(options['kiq_args'])} exited with status {code}", returncode=code)
