"""Docs that cannot drift: every ```python block of README.md and docs/**/*.md runs here.

A page's blocks run in order in one fresh Python process (so a block may use what an earlier one defined), in an
empty directory, with ``KIQ_REDIS_URL`` on an emptied test Redis. A block that cannot run on its own (it shows a
piece of a larger program: undefined names, ``await`` at top level, a Django settings file) is marked a fragment
by the line ``<!-- fragment -->`` right before its fence: it is then compiled (top-level ``await`` allowed) and
every ``kiq`` name it uses is resolved: ``import kiq...`` and ``from kiq... import ...``, and each attribute chain
on such a name (``kiq.plugins.results.result``), so a renamed or removed API fails here. The convention is in
docs/development.md."""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
import linecache
import re
import subprocess
import sys
import textwrap
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support import ROOT, child_env

FRAGMENT = "<!-- fragment -->"
FENCE = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*$")
HOW_TO_MARK = (
    f"a block that cannot run on its own is marked a fragment: put the line {FRAGMENT} right before its ```python "
    "fence (it is then only compiled and its kiq names resolved); see docs/development.md"
)


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # of the first line of code (the fence's line + 1)
    source: str  # dedented to the fence's indentation
    fragment: bool


def blocks_of(page: Path, name: str = "") -> list[Block]:
    """The python blocks of ``page``, named ``name`` in messages (default: its path in the repository)."""
    name = name or str(page.relative_to(ROOT))
    lines = page.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        index += 1
        if fence is None:
            continue
        start = index
        indent = fence["indent"]
        while index < len(lines) and lines[index].strip() != "```":
            index += 1
        if index == len(lines):
            raise AssertionError(f"{name}:{start}: the ```python block is never closed")
        code = [line.removeprefix(indent) for line in lines[start:index]]
        marked = start >= 2 and lines[start - 2].strip() == FRAGMENT
        found.append(Block(name, start + 1, "\n".join(code) + "\n", marked))
        index += 1
    return found


PAGES = [page for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))] if blocks_of(page)]


# -- run in the page's own process (see run_page) ------------------------------------------------------------------
def _compiled(block: Block) -> Any:
    """The block's code object, its line numbers those of the page (tracebacks point into the .md file)."""
    padded = "\n" * (block.line - 1) + block.source
    linecache.cache[block.page] = (len(padded), None, padded.splitlines(keepends=True), block.page)  # for tracebacks
    return compile(padded, block.page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def _resolve(dotted: str) -> None:
    """Import or look up ``kiq.a.b.c`` as Python would once the block's imports ran; raise naming what is missing."""
    parts = dotted.split(".")
    value: Any = importlib.import_module(parts[0])
    for depth in range(1, len(parts)):
        if hasattr(value, parts[depth]):
            value = getattr(value, parts[depth])
        elif isinstance(value, ModuleType):
            try:
                value = importlib.import_module(".".join(parts[: depth + 1]))
            except ModuleNotFoundError:
                raise AttributeError(f"{'.'.join(parts[:depth])} has no {parts[depth]!r}") from None
        else:
            raise AttributeError(f"{'.'.join(parts[:depth])} has no {parts[depth]!r}")


def _chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None for anything else (a call, a subscript...)."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(names)]


def kiq_names(source: str, bound: dict[str, str]) -> list[tuple[int, str]]:
    """The kiq names a block uses, with their lines: what it imports from kiq, and each attribute chain on a name
    bound to kiq (by this block or an earlier one of the page: ``bound`` maps names to dotted paths, updated)."""
    tree = ast.parse(source)
    used: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "kiq":
                    used.append((node.lineno, alias.name))
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        bound["kiq"] = "kiq"
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "kiq":
            for alias in node.names:
                used.append((node.lineno, f"{node.module}.{alias.name}"))
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    outermost = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in outermost:
            chain = _chain(node)
            if chain and chain[0] in bound:
                used.append((node.lineno, ".".join([bound[chain[0]], *chain[1:]])))
    return used


def _run(block: Block, namespace: dict[str, Any]) -> None:
    result = eval(_compiled(block), namespace)  # a coroutine when the block awaits at top level
    if asyncio.iscoroutine(result):
        asyncio.run(result)


def run_page(blocks: list[dict[str, Any]]) -> list[str]:
    """Each block of a page in order (see the module's docstring); the problems found, as messages."""
    import traceback

    # the blocks run as a registered module, as a user's file would: dataclasses and pickling look their module up
    module = types.ModuleType("docs_example")
    sys.modules[module.__name__] = module
    namespace: dict[str, Any] = module.__dict__
    bound: dict[str, str] = {}
    problems: list[str] = []
    for block in [Block(**fields) for fields in blocks]:
        where = f"{block.page}:{block.line}"
        try:
            if block.fragment:
                _compiled(block)
                for line, dotted in kiq_names(block.source, bound):
                    try:
                        _resolve(dotted)
                    except (ImportError, AttributeError) as exc:
                        problems.append(f"{block.page}:{block.line + line - 1}: {dotted} does not resolve: {exc}")
            else:
                _run(block, namespace)
        except BaseException:  # a block's error, whatever it is, is what the doc writer must see
            kind, error, frames = sys.exc_info()
            while frames is not None and frames.tb_frame.f_code.co_filename != block.page:
                frames = frames.tb_next  # from the block's own frame on: not this runner's
            trace = "".join(traceback.format_exception(kind, error, frames))
            what = "fragment" if block.fragment else "block"
            problems.append(f"{where}: the python {what} that starts here fails:\n{textwrap.indent(trace, '    ')}")
    return problems


# -- the tests ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_the_python_blocks_of_the_page_run(page: Path, one_redis_url: str, tmp_path: Path) -> None:
    import redis

    connection = redis.Redis.from_url(one_redis_url)
    connection.flushdb()
    connection.close()
    blocks = json.dumps([asdict(block) for block in blocks_of(page)])
    program = "import json, sys\nfrom tests.test_docs_examples import run_page\n"
    program += "print(json.dumps(run_page(json.loads(sys.stdin.read()))))"
    done = subprocess.run(
        [sys.executable, "-c", program],
        input=blocks,
        cwd=tmp_path,  # whatever a block writes lands here
        env=child_env(KIQ_REDIS_URL=one_redis_url, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{page.relative_to(ROOT)}: the process running its blocks failed:\n{done.stderr}"
    problems: list[str] = json.loads(done.stdout.splitlines()[-1])
    assert not problems, "\n".join([*problems, HOW_TO_MARK])


def test_a_fragment_is_compiled_and_its_kiq_names_resolved(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n<!-- fragment -->\n```python\nimport kiq\nfrom kiq.api import Stats\n"
        "jid = await Job.aio.perform_async(1)\nkiq.api.Stats, kiq.no_such_name.x\nStats().processed\n```\n\n"
        "```python\nx = 1\n```\n"
    )
    fragment, runnable = blocks_of(page, "page.md")
    assert (fragment.fragment, fragment.line, runnable.fragment, runnable.line) == (True, 5, False, 13)
    assert kiq_names(fragment.source, {}) == [
        (1, "kiq"),
        (2, "kiq.api.Stats"),
        (4, "kiq.api.Stats"),
        (4, "kiq.no_such_name.x"),
    ]
    assert run_page([asdict(fragment), asdict(runnable)]) == [
        "page.md:8: kiq.no_such_name.x does not resolve: kiq has no 'no_such_name'"
    ]


def test_a_failing_block_names_its_page_and_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n- a list:\n\n    ```python\n    x = 1\n    print(y)\n    ```\n")
    (block,) = blocks_of(page, "page.md")
    assert block.source == "x = 1\nprint(y)\n" and not block.fragment
    (problem,) = run_page([asdict(block)])
    assert problem.startswith("page.md:6: the python block that starts here fails:")
    assert 'File "page.md", line 7' in problem and "NameError: name 'y' is not defined" in problem


GUARANTEES_HEADER = "| situation | what kiq promises | shown by |"


def _guarantees_table(page: Path) -> list[str]:
    """The rows of ``page``'s guarantees table, each link resolved to the file it names (relative to the repository)."""
    text = page.read_text()
    rows = text[text.index(GUARANTEES_HEADER) :].splitlines()
    rows = rows[: next(i for i, row in enumerate(rows) if not row.startswith("|"))]

    def resolved(link: re.Match[str]) -> str:
        target, _, anchor = link.group(1).partition("#")
        path = (page.parent / target).resolve().relative_to(ROOT) if target else page.relative_to(ROOT)
        return f"]({path}#{anchor})" if anchor else f"]({path})"

    return [re.sub(r"\]\(([^)]*)\)", resolved, row) for row in rows]


def test_the_guarantees_table_is_the_guides_wherever_it_is_shown() -> None:
    """docs/guide/guarantees.md holds the guarantees table and the README links to it; a page that shows the table
    too (README.md or docs/) shows the guide's, row for row (links written for each place)."""
    guide = ROOT / "docs" / "guide" / "guarantees.md"
    assert "](docs/guide/guarantees.md)" in (ROOT / "README.md").read_text()
    assert len(_guarantees_table(guide)) > 2  # the header, its rule and the rows
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    copies = [page for page in pages if page != guide and GUARANTEES_HEADER in page.read_text()]
    assert [page for page in copies if _guarantees_table(page) != _guarantees_table(guide)] == []
