"""pluggy: plugins contribute middleware and settings; plugins named in settings are found by entry point or path."""

from __future__ import annotations

import sys
import types
from collections.abc import Generator, Iterator
from typing import Any

import pytest
import redis

import kiq
import kiq.ext
from kiq.plugin_manager import resolve
from kiq.server.launcher import Launcher


class Audit(kiq.ClientMiddleware):
    def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Generator[None, Any, None]:
        job["audited_by"] = self.config.get("audit_name")
        yield


class Early(kiq.ClientMiddleware):
    def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Generator[None, Any, None]:
        job["order"] = [*job.get("order", []), "early"]
        yield


class AuditPlugin:
    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return [kiq.ext.Setting("audit_name", "anonymous", str, "who audits")]

    @kiq.hookimpl
    def kiq_client_middleware(self, chain: kiq.Chain[Any]) -> None:
        chain.add(Audit)
        chain.prepend(Early)


@pytest.fixture
def plugin_module() -> Iterator[str]:
    module = types.ModuleType("kiq_test_audit_plugin")
    module.plugin = AuditPlugin()  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield f"{module.__name__}:plugin"
    del sys.modules[module.__name__]


class Noop(kiq.Job):
    def perform(self) -> None: ...


def test_registered_plugin_adds_chain_entries(config: kiq.Config, r: redis.Redis) -> None:
    config.add_plugin(AuditPlugin())
    assert [k.__name__ for k in config.client_middleware] == ["Early", "Audit"]
    Noop.perform_async()
    job = kiq.Client(config).redis.lindex("queue:default", 0)
    assert '"audited_by":"anonymous"' in job  # type: ignore[operator]


def test_plugin_named_in_settings_with_its_own_setting(plugin_module: str) -> None:
    config = kiq.Config(plugins=[plugin_module], audit_name="ops")
    assert config.get("audit_name") == "ops"
    assert config.client_middleware.exists(Audit)


def test_plugin_setting_from_environment(plugin_module: str, tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    config = kiq.Config.load(env={"KIQ_PLUGINS": plugin_module, "KIQ_AUDIT_NAME": "env"})
    assert config.get("audit_name") == "env"


def test_unknown_setting_without_its_plugin_fails() -> None:
    with pytest.raises(kiq.ConfigError, match="unknown setting 'audit_name'"):
        kiq.Config(audit_name="ops")


def test_entry_point_plugins_load_only_when_named(config: kiq.Config) -> None:
    assert config.plugins.list_name_plugin() == []
    assert "kiq.plugins.reliable_fetch" not in sys.modules or config.get("plugins") == []


def test_resolve_reports_bad_names() -> None:
    with pytest.raises(kiq.ConfigError, match="neither an installed kiq plugin"):
        resolve("definitely_missing_plugin")
    with pytest.raises(kiq.ConfigError, match="has no attribute"):
        resolve("kiq:nothing_here")


def test_hooks_reach_every_plugin(config: kiq.Config) -> None:
    seen: list[str] = []

    class Watcher:
        @kiq.hookimpl
        def kiq_error(self, exc: BaseException, context: dict[str, Any]) -> None:
            seen.append(f"{context['context']}: {exc}")

    config.plugins.register(Watcher())
    config.handle_exception(ValueError("bad"), {"context": "test"})
    assert seen == ["test: bad"]


# -- one route in, one instance per config ---------------------------------------------------------------
class Counting:
    made = 0

    def __init__(self) -> None:
        Counting.made += 1
        self.startups = 0

    @kiq.hookimpl
    def kiq_startup(self) -> None:
        self.startups += 1


def test_a_plugin_class_is_made_once_per_config_and_keeps_its_state(redis_url: str) -> None:
    Counting.made = 0
    first, second = kiq.Config(redis_url=redis_url), kiq.Config(redis_url=redis_url)
    plugin = first.add_plugin(Counting)
    assert first.add_plugin(Counting) is plugin  # added twice: registered once
    second.add_plugin(Counting)
    assert Counting.made == 2
    first.plugins.notify("kiq_startup", config=first)
    assert plugin.startups == 1 and first.plugins.find(Counting) is plugin


def test_a_class_named_in_the_plugins_setting_is_made_once(plugin_module: str) -> None:
    module_name = plugin_module.partition(":")[0]
    sys.modules[module_name].AuditPlugin = AuditPlugin  # type: ignore[attr-defined]
    config = kiq.Config(plugins=[f"{module_name}:AuditPlugin"])
    assert isinstance(config.plugins.find(AuditPlugin), AuditPlugin)
    assert config.client_middleware.exists(Audit)


def test_a_plugin_class_that_needs_arguments_is_a_clear_error() -> None:
    class NeedsArgs:
        def __init__(self, url: str) -> None: ...

    with pytest.raises(kiq.ConfigError, match="must take no arguments"):
        kiq.Config().add_plugin(NeedsArgs)


# -- the failure rules ---------------------------------------------------------------------------------------
class Raises:
    @kiq.hookimpl
    def kiq_quiet(self) -> None:
        raise RuntimeError("quiet broke")

    @kiq.hookimpl
    def kiq_startup(self) -> None:
        raise RuntimeError("startup broke")


class Records:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.errors: list[str] = []

    @kiq.hookimpl
    def kiq_quiet(self) -> None:
        self.calls.append("quiet")

    @kiq.hookimpl
    def kiq_startup(self) -> None:
        self.calls.append("startup")

    @kiq.hookimpl
    def kiq_error(self, exc: BaseException, context: dict[str, Any]) -> None:
        self.errors.append(f"{context['context']}: {exc}")


@pytest.mark.parametrize("order", ["raising first", "raising last"])
def test_a_raising_notification_is_reported_and_the_other_plugins_still_run(config: kiq.Config, order: str) -> None:
    records = Records()
    for plugin in (Raises(), records) if order == "raising first" else (records, Raises()):
        config.add_plugin(plugin)
    config.plugins.notify("kiq_startup", config=config)
    config.plugins.notify("kiq_quiet", config=config)
    assert records.calls == ["startup", "quiet"]
    assert records.errors == [
        "plugin 'Raises' failed in kiq_startup: startup broke",
        "plugin 'Raises' failed in kiq_quiet: quiet broke",
    ]


def test_a_raising_error_hook_is_only_logged(config: kiq.Config, caplog: pytest.LogCaptureFixture) -> None:
    class BrokenTracker:
        @kiq.hookimpl
        def kiq_error(self) -> None:
            raise RuntimeError("tracker down")

    records = Records()
    config.add_plugin(BrokenTracker())
    config.add_plugin(records)
    config.handle_exception(ValueError("bad"), {"context": "test"})
    assert records.errors == ["test: bad"]
    assert "plugin 'BrokenTracker' failed in kiq_error: tracker down" in caplog.text


def test_a_context_manager_that_fails_to_enter_is_left_out(config: kiq.Config) -> None:
    class Broken:
        def __enter__(self) -> None:
            raise RuntimeError("no span today")

        def __exit__(self, *exc: object) -> None: ...

    class BrokenSpans:
        @kiq.hookimpl
        def kiq_push_bulk(self) -> Any:
            return Broken()

    records = Records()
    config.add_plugin(BrokenSpans())
    config.add_plugin(records)
    assert Noop.perform_bulk([[]] * 3) and config.redis.llen("queue:default") == 3
    assert records.errors and "no span today" in records.errors[0]


def test_a_failing_contribution_stops_with_an_error_naming_the_plugin() -> None:
    class BadSettings:
        @kiq.hookimpl
        def kiq_settings(self) -> list[kiq.ext.Setting]:
            raise RuntimeError("cannot declare")

    config = kiq.Config()
    with pytest.raises(kiq.ConfigError, match="plugin 'BadSettings' failed to set up: RuntimeError: cannot declare"):
        config.add_plugin(BadSettings())
    assert config.plugins.find(BadSettings) is None  # not left half registered


def test_a_plugins_start_up_check_stops_the_worker_before_it_starts(config: kiq.Config, r: redis.Redis) -> None:
    started: list[str] = []

    class Checks:
        @kiq.hookimpl
        def kiq_check(self, config: kiq.Config) -> None:
            raise kiq.ConfigError("the report job is not registered")

        @kiq.hookimpl
        def kiq_startup(self, config: kiq.Config) -> None:
            started.append("started")

    class Breaks:
        @kiq.hookimpl
        def kiq_check(self, config: kiq.Config) -> None:
            raise RuntimeError("no such table")

    for plugin, message in ((Checks(), "the report job is not registered"), (Breaks(), "start-up check failed")):
        config.add_plugin(plugin)
        with pytest.raises(kiq.ConfigError, match=message):
            Launcher(config).run()
        config.plugins.unregister(plugin)
    assert started == [] and r.scard("processes") == 0  # nothing started, nothing registered


def test_notify_calls_the_implementations_in_pluggys_order_and_returns_their_results(config: kiq.Config) -> None:
    """tryfirst first, trylast last, else the last registered first: the order pluggy's own call would use."""
    calls: list[str] = []

    def plugin(name: str, **marks: bool) -> object:
        class Plugin:
            @kiq.hookimpl(**marks)
            def kiq_metrics(self, scope: str) -> list[str] | None:
                calls.append(name)
                return None if name == "quiet" else [f"{name}:{scope}"]

        Plugin.__qualname__ = name
        return Plugin()

    for name, marks in [("first", {"tryfirst": True}), ("a", {}), ("quiet", {}), ("last", {"trylast": True}),
                        ("b", {})]:  # fmt: skip
        config.plugins.register(plugin(name, **marks), name)
    pluggy_order = config.plugins.hook.kiq_metrics(config=config, scope="x")
    calls.clear()
    assert config.plugins.notify("kiq_metrics", config=config, scope="x") == pluggy_order
    assert calls == ["first", "b", "quiet", "a", "last"]
    assert pluggy_order == [["first:x"], ["b:x"], ["a:x"], ["last:x"]]


def test_a_notification_implemented_as_a_wrapper_is_refused(config: kiq.Config) -> None:
    class Wrapping:
        @kiq.hookimpl(wrapper=True)
        def kiq_startup(self) -> Any:
            return (yield)

    with pytest.raises(kiq.ConfigError, match="kiq_startup is a wrapper"):
        config.plugins.register(Wrapping())
    assert not any(isinstance(plugin, Wrapping) for plugin in config.plugins.get_plugins())
