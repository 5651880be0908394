"""The ``kiq_settings_source`` hook: a plugin's settings sit between the config file and the environment of every
config loaded inside ``plugin_settings`` (what the ``kiq`` command line runs each command in), and only there."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import kiq
from kiq.plugin_manager import PluginManager
from kiq.settings import plugin_settings


class ProjectSettings:
    @kiq.hookimpl
    def kiq_settings_source(self) -> tuple[str, Mapping[str, Any]] | None:
        return "the project", {"concurrency": 4, "timeout": 9, "tag": "from-project"}


class NotHere:
    @kiq.hookimpl
    def kiq_settings_source(self) -> tuple[str, Mapping[str, Any]] | None:
        return None


class Broken:
    @kiq.hookimpl
    def kiq_settings_source(self) -> tuple[str, Mapping[str, Any]] | None:
        raise RuntimeError("cannot read")


def manager(*plugins: object) -> PluginManager:
    found = PluginManager(None)
    for plugin in plugins:
        found.add(plugin)
    return found


def test_a_plugins_settings_sit_between_the_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kiq.toml").write_text('concurrency = 2\ntag = "from-file"\npoll_interval = 3\n')
    monkeypatch.setenv("KIQ_TIMEOUT", "8")
    with plugin_settings(manager(ProjectSettings, NotHere).settings_sources()):
        loaded = kiq.Config.load(concurrency=5)
        assert (loaded.concurrency, loaded.timeout, loaded.tag, loaded.poll_interval) == (5, 8.0, "from-project", 3.0)
    assert kiq.Config.load().tag == "from-file"  # after the block, the plugin's settings are gone


def test_a_bad_value_names_the_source() -> None:
    class Typo:
        @kiq.hookimpl
        def kiq_settings_source(self) -> tuple[str, Mapping[str, Any]] | None:
            return "the project", {"concurency": 4}

    with plugin_settings(manager(Typo).settings_sources()), pytest.raises(kiq.ConfigError, match="the project"):
        kiq.Config.load()


def test_a_failing_source_stops_with_an_error_naming_its_plugin() -> None:
    found = PluginManager(None)
    found.add(Broken, "broken")
    with pytest.raises(kiq.ConfigError, match=r"plugin 'broken' failed to give its settings: RuntimeError"):
        found.settings_sources()
