"""The command line of the kiq management commands, which take kiq's own flags, not Django's."""

from __future__ import annotations

# Django's own options, already acted upon by manage.py before the command runs
DJANGO_OPTIONS = ("--settings", "--pythonpath")


def without_django_options(args: list[str]) -> list[str]:
    """``args`` without Django's ``--settings`` / ``--pythonpath`` (and their values)."""
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
        elif arg in DJANGO_OPTIONS:
            skip_value = True  # "--settings mysite.settings": the value follows
        elif not arg.startswith(tuple(option + "=" for option in DJANGO_OPTIONS)):
            kept.append(arg)
    return kept
