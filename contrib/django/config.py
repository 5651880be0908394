"""kiq's settings in a Django project: ``settings.KIQ`` (a dict) is one more source of settings.

Precedence, lowest first: defaults < ``kiq.toml`` / ``[tool.kiq]`` < ``settings.KIQ`` < ``KIQ_*`` environment
variables < explicit arguments (``config(**settings)``, ``kiq_worker``'s flags). ``settings.KIQ`` sits next to
the config file because both are the project's code, checked in; the environment is what an operator changes per
deployment, so it wins over both, as it does over the file alone.

kiq builds its configs from the file and the environment (``kiq.Config.load``); the Django sources are laid over
such a config here, setting by setting, leaving alone what a higher source gave.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import kiq

from ..django_settings import PLUGIN_NAMES, project_settings
from .plugin import DjangoPlugin

ENV_PREFIX = "KIQ_"  # kiq's environment variables: KIQ_<SETTING NAME>


def config(**settings: Any) -> kiq.Config:
    """A new Config: defaults < kiq.toml < ``settings.KIQ`` < ``KIQ_*`` environment < ``settings``."""
    built = apply_settings(kiq.Config.load(), keep=settings)
    with _origin("arguments"):
        _assign(built, settings)
    return built


def apply_settings(config: kiq.Config, keep: Collection[str] = ()) -> kiq.Config:
    """Lay ``settings.KIQ`` over ``config`` (loaded from the file and the environment) and add the Django plugin.

    Settings that the environment gives, and those named in ``keep`` (set by a higher source, e.g. a worker's
    flags), are left as they are. Returns ``config``."""
    environment = _environment()
    skipped = set(environment) | set(keep)
    values = {name: value for name, value in project_settings().items() if name not in skipped}
    with _origin("settings.KIQ"):
        _assign(config, {"plugins": values.pop("plugins", [])})
        config.add_plugin(DjangoPlugin)  # after the project's plugins: its middleware is prepended, so outermost
        _assign(config, values)
    # the plugins added here declare settings of their own, which the environment may set: the config could not
    # read those when it was loaded, before the plugins were known
    known = {setting.name for setting in config.describe_settings()}
    late = {name: value for name, value in environment.items() if name in known and name not in keep}
    with _origin("the environment"):
        _assign(config, {name: value for name, value in late.items() if name != "plugins"})
    return config


def _environment() -> dict[str, str]:
    return {name[len(ENV_PREFIX) :].lower(): value for name, value in os.environ.items() if name.startswith(ENV_PREFIX)}


def _assign(config: kiq.Config, values: Mapping[str, Any]) -> None:
    """Set ``values`` on ``config`` in the order that lets each be known: plugins first (they declare settings),
    then ``fetch`` (it may bring a plugin along), then the rest."""
    remaining = dict(values)
    for name in PLUGIN_NAMES.parse(remaining.pop("plugins", [])):
        config.add_plugin(name)
    if "fetch" in remaining:
        config.fetch = remaining.pop("fetch")
    for name, value in remaining.items():
        setattr(config, name, value)


@contextmanager
def _origin(where: str) -> Iterator[None]:
    """Name the source in a refusal: kiq's own message says only that the value was assigned."""
    try:
        yield
    except kiq.ConfigError as exc:
        raise kiq.ConfigError(f"{where}: {exc}") from exc
