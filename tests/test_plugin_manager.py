"""pluggy: plugins contribute middleware and settings; plugins named in settings are found by entry point or path."""

from __future__ import annotations

import sys
import types
from collections.abc import Generator, Iterator
from typing import Any

import pytest
import redis

import kiq
from kiq.plugin_manager import resolve


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
    def kiq_settings(self) -> list[kiq.Setting]:
        return [kiq.Setting("audit_name", "anonymous", str, "who audits")]

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
