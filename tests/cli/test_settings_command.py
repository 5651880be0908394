"""``kiq settings``: every setting (core and the config's plugins') with its current value and help."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import kiq
import kiq.ext
from kiq.cli import main


class ReportPlugin:
    """A plugin that declares a setting, named in the test's config file."""

    @kiq.hookimpl
    def kiq_settings(self) -> list[kiq.ext.Setting]:
        return [kiq.ext.Setting.integer("report_every", 30, 1, help="seconds between reports")]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("KIQ_REDIS_URL", "KIQ_CONCURRENCY", "KIQ_PLUGINS", "KIQ_EMBEDDED_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KIQ_CONCURRENCY", "7")
    (tmp_path / "kiq.toml").write_text(
        f'plugins = ["{__name__}:ReportPlugin"]\nqueues = ["critical,2", "default"]\n'
        'redis_url = "redis://:secret@example.invalid:6379/0"\n'
    )
    return tmp_path


def run(*args: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["settings", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.usefixtures("project")
def test_settings_lists_values_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys=capsys)
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert out.splitlines()[0].split() == ["SETTING", "VALUE", "HELP"]
    assert rows["concurrency"].split()[:2] == ["concurrency", "7"]  # from the environment
    assert "processor threads per worker process" in rows["concurrency"]
    assert '["critical,2", "default"]' in rows["queues"]  # as it would be written in kiq.toml
    assert rows["report_every"].split()[:2] == ["report_every", "30"]  # the plugin's, with its default
    assert "seconds between reports" in rows["report_every"]
    assert rows["tag"].split()[1] == "(unset)"
    assert "secret" not in out and "redis://:***@example.invalid:6379/0" in rows["redis_url"]  # no password shown


@pytest.mark.usefixtures("project")
def test_settings_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    listed: dict[str, Any] = {setting["name"]: setting for setting in json.loads(run("--json", capsys=capsys))}
    assert listed["concurrency"] == {
        "name": "concurrency",
        "value": 7,
        "default": 10,
        "help": "processor threads per worker process",
    }
    assert listed["queues"]["value"] == ["critical,2", "default"] and listed["tag"]["value"] is None
    assert listed["report_every"]["value"] == 30 and listed["redis_url"]["value"].startswith("redis://:***@")
    assert list(listed) == sorted(listed)


def test_settings_reads_the_given_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "other.toml").write_text("timeout = 4\n")
    out = run("-C", str(tmp_path / "other.toml"), capsys=capsys)
    assert next(line for line in out.splitlines() if line.startswith("timeout ")).split()[1] == "4.0"
