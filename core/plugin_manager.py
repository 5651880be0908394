"""The pluggy plugin manager of a Config: how plugins are found, registered once, and kept from hurting each other.

See kiq.hookspecs for the hooks and their two failure rules; this module applies them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

import pluggy

from . import hookspecs
from .errors import ConfigError
from .held_writes import WriteKeeper, hold_write
from .settings import Source, did_you_mean

if TYPE_CHECKING:
    from .config import Config

log = logging.getLogger("kiq")

ENTRY_POINT_GROUP = "kiq.plugins"
P = TypeVar("P")


class PluginManager(pluggy.PluginManager):
    """pluggy's manager for the ``kiq`` project, bound to a config (None for the CLI's look at installed plugins)."""

    def __init__(self, config: Config | None) -> None:
        super().__init__("kiq")
        self.add_hookspecs(hookspecs)
        self.config = config
        # a worker's OutcomeKeeper (kiq.server.outcomes), which makes the writes kiq.ext.hold_write hands it once Redis
        # takes them (a death hook's whose own write is refused, among them); None elsewhere (the API, a web request)
        self.write_keeper: WriteKeeper | None = None
        if config is not None:  # historic: every plugin, registered now or later, is asked once
            self.hook.kiq_settings.call_historic(result_callback=config.declare_settings, kwargs={})
            middleware = {"chain": config.client_middleware, "config": config}
            self.hook.kiq_client_middleware.call_historic(kwargs=middleware)
            self.hook.kiq_server_middleware.call_historic(kwargs={**middleware, "chain": config.server_middleware})

    @overload
    def add(self, plugin: type[P], name: str | None = None) -> P: ...

    @overload
    def add(self, plugin: object, name: str | None = None) -> object: ...

    def add(self, plugin: object, name: str | None = None) -> object:
        """Register ``plugin`` unless it (or, for a class, an instance of it) is registered already: an object, a
        class (made with no arguments, so each config gets its own), or a name (see ``resolve``)."""
        if isinstance(plugin, str):
            name = name or plugin
            plugin = resolve(plugin)
        if isinstance(plugin, type):
            existing = self.find(plugin)
            if existing is not None:
                return existing
            try:
                instance = plugin()
            except TypeError as exc:
                raise ConfigError(f"plugin class {plugin.__qualname__} must take no arguments: {exc}") from exc
            plugin = instance
        elif self.is_registered(plugin):
            return plugin
        self.register(plugin, name)
        return plugin

    def find(self, cls: type[P]) -> P | None:
        """The registered plugin that is an instance of ``cls``, if any."""
        return next((plugin for plugin in self.get_plugins() if isinstance(plugin, cls)), None)

    def register(self, plugin: object, name: str | None = None) -> str | None:
        """Register ``plugin``; the historic hooks run for it now (its settings, its middleware). A failure there
        leaves it unregistered and stops with an error naming it."""
        try:
            registered = super().register(plugin, name)
        except ValueError as exc:  # pluggy: a name taken, or an implementation that matches no hook
            raise ConfigError(f"plugin {describe(plugin, name)!r} cannot be registered: {exc}") from exc
        except Exception as exc:
            if self.is_registered(plugin):
                self.unregister(plugin)
            described = describe(plugin, name)
            raise ConfigError(f"plugin {described!r} failed to set up: {type(exc).__name__}: {exc}") from exc
        if registered is not None:
            self._refuse_wrapped_notifications(plugin, name)
        return registered

    def _refuse_wrapped_notifications(self, plugin: object, name: str | None) -> None:
        """kiq calls a notification's implementations one by one (``notify``): a wrapper has no inner call to wrap."""
        for caller in self.get_hookcallers(plugin) or ():
            if caller.name in hookspecs.NOTIFICATIONS and any(
                impl.plugin is plugin and (impl.wrapper or impl.hookwrapper) for impl in caller.get_hookimpls()
            ):
                self.unregister(plugin)
                raise ConfigError(
                    f"plugin {describe(plugin, name)!r} cannot be registered: its {caller.name} is a wrapper, and a "
                    "notification's implementations are each called on their own (drop wrapper=True)"
                )

    def notify(self, hook: str, **kwargs: Any) -> list[Any]:
        """Call each implementation of the notification ``hook`` with ``kwargs``, on its own, in pluggy's order
        (``tryfirst`` ones first, ``trylast`` ones last, else the last registered first); return what they returned,
        None left out. One that raises is handled by the hook's failure rule (``hookspecs.NOTIFICATIONS``) and the
        others still run: pluggy's own call would stop at the first. Every call of a notification goes through here."""
        rule = hookspecs.NOTIFICATIONS[hook]
        results: list[Any] = []
        for impl in reversed(getattr(self.hook, hook).get_hookimpls()):  # pluggy calls its list from the end
            args = [kwargs[argname] for argname in impl.argnames]
            keywords = {argname: kwargs[argname] for argname in impl.kwargnames if argname in kwargs}
            try:
                result = impl.function(*args, **keywords)
            except Exception as exc:
                self._failed(hook, rule, impl, functools.partial(impl.function, *args, **keywords), kwargs, exc)
                continue
            if result is not None:
                results.append(result)
        return results

    def _failed(
        self,
        hook: str,
        rule: hookspecs.FailureRule,
        impl: pluggy.HookImpl,
        call: Callable[[], object],
        kwargs: dict[str, Any],
        exc: Exception,
    ) -> None:
        plugin = describe(impl.plugin, impl.plugin_name)
        # "hold": Redis refused the implementation's own write (an outage): this call, and only it, is made again
        if rule == "hold" and self.config is not None:
            what = f"the {hook} hook of plugin {plugin!r} did not run"
            if hold_write(call, exc, config=self.config, what=what, job=kwargs.get("job")):
                return
        self.report(exc, f"plugin {plugin!r} failed in {hook}", log_only=rule == "log")

    def report(self, exc: Exception, context: str, log_only: bool = False) -> None:
        """Log a plugin's failure and tell the ``kiq_error`` hooks (not when it came from one of them)."""
        if log_only or self.config is None:
            log.error("%s: %s", context, exc, exc_info=exc)
        else:
            self.config.handle_exception(exc, {"context": context})

    def settings_sources(self) -> list[Source]:
        """What the ``kiq_settings_source`` implementations give, each as a settings ``Source``; one that fails
        stops with an error naming its plugin."""
        sources = []
        for impl in self.hook.kiq_settings_source.get_hookimpls():
            try:
                given = cast("tuple[str, Mapping[str, Any]] | None", impl.function())
            except ConfigError:
                raise
            except Exception as exc:
                raise ConfigError(
                    f"plugin {describe(impl.plugin, impl.plugin_name)!r} failed to give its settings: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if given is not None:
                origin, values = given
                sources.append(Source(origin, values))
        return sources

    @contextlib.contextmanager
    def enter(self, scopes: Iterable[contextlib.AbstractContextManager[Any] | None]) -> Iterator[None]:
        """Run the block inside every context manager a notification hook returned (``kiq_operation``,
        ``kiq_push_bulk``); one that fails to enter is reported and left out."""
        with contextlib.ExitStack() as stack:
            for scope in scopes:
                if scope is None:
                    continue
                try:
                    stack.enter_context(scope)
                except Exception as exc:
                    self.report(exc, f"a plugin's context manager failed to enter: {scope!r}")
            yield


def describe(plugin: object, name: str | None) -> str:
    """A plugin's name for messages: its registered name, or its class's when pluggy named it by its id."""
    if name and not name.isdigit():
        return name
    return getattr(plugin, "__name__", None) or type(plugin).__name__


def installed_plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """The plugins installed in this environment (the ``kiq.plugins`` entry point group), by name."""
    return {entry_point.name: entry_point for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def resolve(name: str) -> object:
    """Find a plugin named in the settings: an entry point of the ``kiq.plugins`` group, else ``module[:attr]``.

    Settings are written by the operator, so importing what they name is fine (unlike names in payloads).
    """
    installed = installed_plugins()
    if name in installed:
        entry_point = installed[name]
        try:
            return entry_point.load()
        except Exception as exc:  # most likely an optional dependency is missing: say so in one line
            extra = f" (pip install 'kiq[{name}]')" if entry_point.value.startswith("kiq.") else ""
            raise ConfigError(
                f"plugin {name!r} is installed but cannot be loaded: {type(exc).__name__}: {exc}. Install what it "
                f"needs{extra} or take it out of the plugins setting"
            ) from exc
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = did_you_mean(name, installed)
        raise ConfigError(
            f"plugin {name!r} is neither an installed kiq plugin{hint} (installed: {', '.join(sorted(installed))}) "
            f"nor an importable module: {exc}"
        ) from exc
    if not attr:
        return module
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ConfigError(f"plugin {name!r}: module {module_name!r} has no attribute {attr!r}") from exc
