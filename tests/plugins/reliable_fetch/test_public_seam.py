"""The shipped fetchers are built on ``kiq.ext.BatchFetch``'s public seam only, as a third-party fetcher must be: none
of their private names is one of the engine's (reading one would depend on internals; assigning one would clobber
them)."""

from __future__ import annotations

import ast
import inspect

import kiq
import kiq.ext
from kiq.plugins.reliable_fetch import ReliableFetch
from kiq.server.fetch import BasicFetch


def private_names(cls: type) -> set[str]:
    """The ``_name``s (not dunders) a class's own source reads or assigns on ``self``, or defines as methods."""
    tree = ast.parse(inspect.getsource(cls))
    names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    names |= {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
    }
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def test_the_shipped_fetchers_use_no_private_name_of_the_engine() -> None:
    engine = private_names(kiq.ext.BatchFetch)
    assert {"_lock", "_leading", "_closed", "_lead"} <= engine  # what is compared: the engine's own internals
    assert private_names(ReliableFetch) & engine == set()
    assert private_names(BasicFetch) & engine == set()
