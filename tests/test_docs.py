"""The documentation site (``make docs``, into build/site): every public name of ``kiq.__all__`` and
``kiq.ext.__all__`` has its entry in the API reference, every shipped plugin and framework module has a reference
page, and the changelog and the license are the repository's own files. ``make test`` builds the site first; without
it these tests are skipped."""

from __future__ import annotations

import importlib.metadata
from types import ModuleType

import pytest

import kiq
import kiq.ext
from tests.support import ROOT

SITE = ROOT / "build" / "site"


def page(path: str) -> str:
    built = SITE / path / "index.html"
    if not built.exists():
        pytest.skip("the documentation site is not built: make docs")
    return built.read_text()


def reference() -> str:
    """Every API reference page, as one text."""
    page("reference/kiq")
    return "\n".join(built.read_text() for built in (SITE / "reference").glob("*/index.html"))


@pytest.mark.parametrize(("module", "reference_page"), [(kiq, "kiq"), (kiq.ext, "ext")], ids=["kiq", "kiq.ext"])
def test_every_public_name_of_kiq_has_an_entry_in_the_api_reference(module: ModuleType, reference_page: str) -> None:
    html = page(f"reference/{reference_page}")
    prefix = module.__name__
    # a name that is also a module of kiq (kiq.job: the decorator and core/job.py) is documented under the module
    missing = [
        name
        for name in module.__all__
        if f'id="{prefix}.{name}"' not in html and f'id="{prefix}.{name}.{name}"' not in html
    ]
    assert missing == [], f"names of {prefix}.__all__ without an entry in docs/reference/{reference_page}.md: {missing}"


def test_every_installed_plugin_and_the_integrations_have_a_reference_page() -> None:
    html = reference()
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


def test_the_changelog_and_the_license_pages_are_the_repositorys_files() -> None:
    changelog = page("changelog")
    assert "Keep a Changelog" in changelog and f"[{kiq.__version__}]" in changelog
    assert "MIT License" in page("license") and (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_every_page_of_docs_is_built() -> None:
    page("reference/kiq")
    sources = [path.relative_to(ROOT / "docs").with_suffix("") for path in (ROOT / "docs").rglob("*.md")]
    # a directory's index.md or README.md (mkdocs' rule; GitHub shows the README) is built as the directory's page
    built = [source for source in sources if (SITE / source / "index.html").exists()
             or (source.name in ("index", "README") and (SITE / source.parent / "index.html").exists())]  # fmt: skip
    assert sorted(map(str, built)) == sorted(map(str, sources))
