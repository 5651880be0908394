"""``settings.KIQ`` for the ``kiq`` command line: when ``DJANGO_SETTINGS_MODULE`` is set, ``kiq stats``, ``kiq web``,
``kiq worker``... set Django up and read the project's settings, between the config file and the environment.

An installed plugin (the ``django`` entry point of the ``kiq.plugins`` group), asked by every ``kiq`` command
through the ``kiq_settings_source`` hook. Outside the ``kiq.contrib.django`` package, which imports Django: this
module imports it only when the variable is set, so ``kiq`` works where Django is not installed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import kiq
import kiq.ext

SETTINGS_MODULE = "DJANGO_SETTINGS_MODULE"
# the Django plugin by the name the plugins setting takes: its on-commit pushes and its django_on_commit setting
DJANGO_PLUGIN = "kiq.contrib.django.plugin:DjangoPlugin"
PLUGIN_NAMES = kiq.ext.Setting.names("plugins", [])  # parses a plugins value as kiq does (a list, or "a,b")


class DjangoSettings:
    @kiq.hookimpl
    def kiq_settings_source(self) -> tuple[str, Mapping[str, Any]] | None:
        module = os.environ.get(SETTINGS_MODULE)
        if not module:
            return None
        setup_django(module)
        values = project_settings()
        values["plugins"] = [*PLUGIN_NAMES.parse(values.get("plugins", [])), DJANGO_PLUGIN]
        return "settings.KIQ", values


def setup_django(module: str) -> None:
    """``django.setup()``, so that job modules may import models; an error names the variable and the fix."""
    try:
        import django

        django.setup()  # does nothing when Django is set up already (manage.py kiq)
    except ImportError as exc:
        raise kiq.ConfigError(
            f"{SETTINGS_MODULE}={module!r} but Django or the settings module cannot be imported ({exc}): install "
            f"Django, run kiq from the project's directory (or put it on PYTHONPATH), or unset {SETTINGS_MODULE}"
        ) from exc


def project_settings() -> dict[str, Any]:
    """``settings.KIQ``, or nothing when the project has none."""
    from django.conf import settings

    values = getattr(settings, "KIQ", {})
    if not isinstance(values, Mapping) or not all(isinstance(name, str) for name in values):
        raise kiq.ConfigError(f"settings.KIQ must be a dict of kiq settings by name, got {values!r:.80}")
    return dict(values)
