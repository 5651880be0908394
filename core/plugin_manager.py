"""The pluggy plugin manager of a Config, and how plugins named in the settings are found."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pluggy

from . import hookspecs
from .errors import ConfigError

if TYPE_CHECKING:
    from .config import Config, Setting

ENTRY_POINT_GROUP = "kiq.plugins"


class PluginManager(pluggy.PluginManager):
    """pluggy's manager for the ``kiq`` project; registering a plugin lets it add to the config's chains."""

    def __init__(self, config: Config) -> None:
        super().__init__("kiq")
        self.add_hookspecs(hookspecs)
        self.config = config

    def register(self, plugin: object, name: str | None = None) -> str | None:
        """Register ``plugin``; its settings become known, then it adds its middleware to the chains."""
        registered = super().register(plugin, name)
        if registered is not None:
            config = self.config
            settings: list[Setting] = [s for batch in self._call_own(plugin, "kiq_settings") for s in batch or []]
            config.declare_settings(settings, owner=registered)
            self._call_own(plugin, "kiq_client_middleware", chain=config.client_middleware, config=config)
            self._call_own(plugin, "kiq_server_middleware", chain=config.server_middleware, config=config)
        return registered

    def _call_own(self, plugin: object, hook_name: str, **kwargs: Any) -> list[Any]:
        """Call the implementations of one hook that ``plugin`` provides, and no one else's."""
        caller = getattr(self.hook, hook_name)
        return [
            impl.function(*(kwargs[arg] for arg in impl.argnames))
            for impl in caller.get_hookimpls()
            if impl.plugin is plugin
        ]


@contextlib.contextmanager
def entered(scopes: Iterable[contextlib.AbstractContextManager[Any]]) -> Iterator[None]:
    """Run the block inside every context manager that a hook's implementations returned (e.g. ``kiq_operation``)."""
    with contextlib.ExitStack() as stack:
        for scope in scopes:
            stack.enter_context(scope)
        yield


def resolve(name: str) -> object:
    """Find a plugin named in the settings: an entry point of the ``kiq.plugins`` group, else ``module[:attr]``.

    Settings are written by the operator, so importing what they name is fine (unlike names in payloads).
    """
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.name == name:
            return entry_point.load()
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"plugin {name!r} is neither an installed kiq plugin (entry point group {ENTRY_POINT_GROUP!r}) "
            f"nor an importable module: {exc}"
        ) from exc
    if not attr:
        return module
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ConfigError(f"plugin {name!r}: module {module_name!r} has no attribute {attr!r}") from exc
