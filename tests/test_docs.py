"""The documentation site (mkdocs.yml): it builds with warnings as errors, every public name of ``kiq.__all__`` and
``kiq.ext.__all__`` has its entry in the API reference, every shipped plugin and framework module has a reference
page, and the changelog and the license are the repository's own files. The site is built here, into a temporary
directory, by the test process that runs these tests (beside the others, not before them); it needs the docs
dependency group and ``make view``, which ``make test`` and ``make docs`` install and link, and is skipped without
them (failed under KIQ_REQUIRE_SERVICES=1)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import kiq
import kiq.ext
from tests.support import ROOT, missing_service


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    if not mkdocs.exists() or not (ROOT / "build" / "view" / "kiq").is_dir():
        missing_service("the site's tools (the docs dependency group) or the package view are missing: make docs")
    built = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        # not --quiet: MkDocs 1.6 then drops the warnings before --strict counts them
        [str(mkdocs), "build", "--strict", "--site-dir", str(built)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    warnings = [line for line in (result.stdout + result.stderr).splitlines() if not line.startswith("INFO")]
    assert result.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(warnings)
    return built


def page(site: Path, path: str) -> str:
    return (site / path / "index.html").read_text()


def reference(site: Path) -> str:
    """Every API reference page, as one text."""
    return "\n".join(built.read_text() for built in (site / "reference").glob("*/index.html"))


@pytest.mark.parametrize(("module", "reference_page"), [(kiq, "kiq"), (kiq.ext, "ext")], ids=["kiq", "kiq.ext"])
def test_every_public_name_of_kiq_has_an_entry_in_the_api_reference(
    site: Path, module: ModuleType, reference_page: str
) -> None:
    html = page(site, f"reference/{reference_page}")
    prefix = module.__name__
    # a name that is also a module of kiq (kiq.job: the decorator and core/job.py) is documented under the module
    missing = [
        name
        for name in module.__all__
        if f'id="{prefix}.{name}"' not in html and f'id="{prefix}.{name}.{name}"' not in html
    ]
    assert missing == [], f"names of {prefix}.__all__ without an entry in docs/reference/{reference_page}.md: {missing}"


def test_every_installed_plugin_and_the_integrations_have_a_reference_page(site: Path) -> None:
    html = reference(site)
    plugins = [entry.value.replace(":", ".") for entry in importlib.metadata.entry_points(group="kiq.plugins")]
    integrations = [
        "kiq.contrib.django.DjangoPlugin",
        "kiq.contrib.starlette.install",
        "kiq.contrib.fastapi.mount_tracking",
        "kiq.contrib.fastapi.mount_web",
        "kiq.contrib.flask.mount_web",
        "kiq.contrib.sentry.KiqIntegration",
        "kiq.contrib.web.asgi_app",
        "kiq.tabs.Tab",
    ]
    missing = [name for name in [*plugins, *integrations] if f'id="{name}"' not in html]
    assert missing == [], f"add a page under docs/reference/ (and to mkdocs.yml's nav) for {missing}"


def test_the_changelog_and_the_license_pages_are_the_repositorys_files(site: Path) -> None:
    changelog = page(site, "changelog")
    assert "Keep a Changelog" in changelog and f"[{kiq.__version__}]" in changelog
    assert "MIT License" in page(site, "license") and (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_every_page_of_docs_is_built(site: Path) -> None:
    sources = [path.relative_to(ROOT / "docs").with_suffix("") for path in (ROOT / "docs").rglob("*.md")]
    # a directory's index.md or README.md (mkdocs' rule; GitHub shows the README) is built as the directory's page
    built = [source for source in sources if (site / source / "index.html").exists()
             or (source.name in ("index", "README") and (site / source.parent / "index.html").exists())]  # fmt: skip
    assert sorted(map(str, built)) == sorted(map(str, sources))
