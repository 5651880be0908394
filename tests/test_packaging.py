"""What an installation of kiq says about itself: one version, its license, what it runs on, and the files it ships."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import kiq
from tests.support import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_version_is_written_once() -> None:
    assert kiq.__version__ == importlib.metadata.version("kiq") == PYPROJECT["version"]
    written = [
        path.relative_to(ROOT)
        for folder in ("core", "plugins", "contrib")
        for path in (ROOT / folder).rglob("*.py")
        if re.search(r"""__version__\s*=\s*["']""", path.read_text())
    ]
    assert written == [], "a version literal besides pyproject.toml's"


def test_the_metadata_names_license_python_and_typing() -> None:
    metadata = importlib.metadata.metadata("kiq")
    assert metadata["License-Expression"] == "MIT"
    assert "LICENSE" in metadata.get_all("License-File", [])
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    classifiers = set(metadata.get_all("Classifier", []))
    assert {
        "Typing :: Typed",
        "Programming Language :: Python :: 3.11",
        "Intended Audience :: Developers",
    } <= classifiers
    assert metadata["Requires-Python"] == ">=3.11"


def test_the_package_ships_its_type_marker_and_entry_points() -> None:
    package = Path(kiq.__file__).parent
    assert (package / "py.typed").exists()
    entry_points = importlib.metadata.entry_points()
    assert [ep.value for ep in entry_points.select(group="console_scripts", name="kiq")] == ["kiq.cli:main"]
    plugins = {ep.name for ep in entry_points.select(group="kiq.plugins")}
    assert plugins == {
        "reliable_fetch",
        "tracking",
        "otel",
        "periodic",
        "unique",
        "expiry",
        "limiter",
        "batch",
        "results",
        "activejob",
        "workflow",
        "metrics",
        "encryption",
        "groups",
        "profiling",
        "web",  # only for its command, `kiq web`
        "django",  # only for kiq_settings_source: settings.KIQ when DJANGO_SETTINGS_MODULE is set
    }
    # a setting that loads its plugin when given: metrics_port alone serves /metrics
    settings = {ep.name: ep.value for ep in entry_points.select(group="kiq.settings")}
    assert settings == {
        "metrics_port": "kiq.plugins.metrics:MetricsPlugin",
        "encryption_keys": "kiq.plugins.encryption:EncryptionPlugin",  # keys given: every push encrypts
        "group_concurrency": "kiq.plugins.groups:GroupsPlugin",  # a limit given: grouped jobs are limited
    }
    assert (package / "contrib" / "web" / "static" / "kiq.js").exists()  # the dashboard's assets ship
    assert (package / "contrib" / "web" / "static" / "kiq.css").exists()


def test_linters_are_a_dev_group_not_the_test_extra() -> None:
    test_extra = " ".join(PYPROJECT["optional-dependencies"]["test"])
    assert not re.search(r"\b(mypy|ruff|import-linter)\b", test_extra)
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["dev"]
    assert {re.split(r"[<>=]", requirement)[0] for requirement in dev} >= {"mypy", "ruff", "import-linter"}


def test_building_the_wheel_warns_of_nothing_and_ships_the_dashboard_assets(tmp_path: Path) -> None:
    """setuptools warned, in 40 lines on every install, that the dashboard's static folder was missing from
    ``packages``. Built as ``pip install .`` builds (an isolated build environment with the setuptools that
    pyproject.toml asks for, from the package index), from a copy of the sources so the checkout's build/ is left
    alone."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("core", "plugins", "contrib"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(tmp_path), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    assert "Warning" not in built.stdout + built.stderr, built.stdout + built.stderr
    (wheel,) = tmp_path.glob("kiq-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    assert {"kiq/contrib/web/static/kiq.js", "kiq/contrib/web/static/kiq.css", "kiq/py.typed"} <= shipped
