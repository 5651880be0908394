"""The static slot test: every Lua script kiq and its plugins run is declared (``kiq.ext.lua_script``), names its keys
only through ``KEYS`` (or by appending to a ``KEYS`` entry), and the keys of one call fall in one hash slot in
both cluster layouts. A script that would fail with CROSSSLOT on a Redis Cluster fails here, without a cluster."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest
from redis.crc import key_slot

import kiq
import kiq.contrib
import kiq.ext
import kiq.plugins
from kiq.scripts import LuaScript, registered_scripts

ROOT = Path(__file__).resolve().parents[1]
KEYLESS = {"TIME", "PING", "ECHO", "INFO", "PUBLISH"}  # commands whose first argument is not a key (a channel)


def _import_everything() -> list[LuaScript]:
    for package in (kiq, kiq.plugins, kiq.contrib):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if ".django" in module.name or module.name.endswith("__main__"):  # Django setup; a CLI run on import
                continue
            importlib.import_module(module.name)
    return registered_scripts()


SCRIPTS = _import_everything()
CALL = re.compile(r"redis\.p?call\(\s*(['\"])(\w+)\1\s*,\s*")


def _argument(source: str, start: int) -> str:
    """The Lua expression that starts at ``start``, up to the comma or parenthesis that ends it."""
    depth = 0
    for at in range(start, len(source)):
        char = source[at]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                return source[start:at].strip()
            depth -= 1
        elif char == "," and depth == 0:
            return source[start:at].strip()
    return source[start:].strip()


def _definition(source: str, name: str) -> str | None:
    """What a local name stands for: ``local name = expr``, ``local function name(...) return expr``, or a loop
    over ``ipairs(KEYS)``."""
    patterns = (
        rf"local\s+{name}\s*=\s*([^\n]+)",
        rf"local\s+function\s+{name}\s*\([^)]*\)\s*return\s+([^\n]+)",
        rf"function\s+{name}\s*\([^)]*\)\s*return\s+([^\n]+)",
        rf"for\s+[\w\s,]*\b{name}\b[\w\s,]*\s+in\s+ipairs\((KEYS)\)",
    )
    for pattern in patterns:
        found = re.search(pattern, source)
        if found:
            return found.group(1).strip()
    return None


def _key_problem(source: str, expression: str, seen: frozenset[str] = frozenset()) -> str | None:
    """Why ``expression`` (a key argument) is not a KEYS entry or built by appending to one; None if it is."""
    if expression.startswith("KEYS"):
        return None
    head = re.match(r"[A-Za-z_]\w*", expression)
    if head is None or head.group(0) == "ARGV":
        return f"key {expression!r} is not KEYS[i] nor built on it"
    name = head.group(0)
    if name in seen:
        return f"key {expression!r} is defined in a loop of names"
    definition = _definition(source, name)
    if definition is None:
        return f"key {expression!r}: {name!r} is not defined from KEYS in the script"
    return _key_problem(source, definition, seen | {name})


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda script: script.name)
def test_a_script_names_its_keys_only_through_KEYS(script: LuaScript) -> None:
    problems = []
    for call in CALL.finditer(script.source):
        if call.group(2).upper() in KEYLESS:
            continue
        problem = _key_problem(script.source, _argument(script.source, call.end()))
        if problem is not None:
            problems.append(f"{call.group(2)}: {problem}")
    assert not problems, f"{script.name}: " + "; ".join(problems)


def _samples(script: LuaScript, keys: kiq.ext.Keyspace) -> dict[str, object]:
    """Names for each parameter of the script's key builder: queue names with braces (a user's), several queues
    where the layout lets one call take several (the callers pass one slot group: ``Keyspace.slot_groups``)."""
    samples: dict[str, object] = {}
    for name in list(inspect.signature(script.keys).parameters)[1:]:
        if name == "queues":
            samples[name] = keys.slot_groups([keys.queue(q) for q in ("critical", "de}fault", "{low}")])[0]
            samples[name] = [keys.queue_name(key) for key in samples[name]]  # type: ignore[attr-defined]
        elif name == "queue":
            samples[name] = "de}fault"
        else:  # an id or a name kiq made (no brace: Keyspace.beside_queue's rule)
            samples[name] = f"sample-{name}"
    return samples


@pytest.mark.parametrize("slots", ["one", "queue"])
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda script: script.name)
def test_the_keys_of_a_call_fall_in_one_slot(script: LuaScript, slots: kiq.keys.Slots) -> None:
    keys = kiq.ext.Keyspace(slots)
    declared = script.keys(keys, **_samples(script, keys))
    assert declared, f"{script.name} declares no key: a cluster could not route it"
    slot_of = {key: key_slot(key.encode("utf-8", "surrogateescape")) for key in declared}
    assert len(set(slot_of.values())) == 1, f"{script.name} ({slots}): keys in several slots: {slot_of}"


def test_every_script_that_runs_is_declared() -> None:
    """A script registered with Redis but not through kiq.ext.lua_script would escape the tests above."""
    undeclared = []
    for path in [*ROOT.glob("core/**/*.py"), *ROOT.glob("plugins/**/*.py"), *ROOT.glob("contrib/**/*.py")]:
        text = path.read_text()
        for found in re.finditer(r"register_script\(([^)]*)\)|connection\.script\(\s*([^,)]+)", text):
            argument = (found.group(1) or found.group(2)).strip()
            if not argument.endswith(".source") and argument not in ("self.source", "source"):
                undeclared.append(f"{path.relative_to(ROOT)}: {found.group(0)}")
    assert not undeclared, "scripts not declared with kiq.ext.lua_script: " + "; ".join(undeclared)


def test_the_lint_catches_a_literal_key_and_an_argv_prefix() -> None:
    """The checks above can fail: a literal key, a prefix from ARGV, a name not built on KEYS."""
    assert _key_problem("", "'queues'") is not None
    assert _key_problem("", "'queue:' .. name") is not None
    assert _key_problem("", "ARGV[1] .. bid") is not None
    assert _key_problem("local base = ARGV[2]\n", "base .. ':x'") is not None
    assert _key_problem("local function key(part) return KEYS[1] .. part end\n", "key('wait')") is None
    assert _key_problem("for _, list in ipairs(KEYS) do\n", "list") is None
