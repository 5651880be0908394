"""The public surfaces, pinned (httpx's way): ``kiq`` (what an application uses), ``kiq.ext`` (what a plugin, a fetcher
or a tool on kiq's Redis data uses), ``kiq.api`` and ``kiq.testing``. A name added to or taken from one of them is a
change of the public API: it shows here first, and in the CHANGELOG. Also: ``import kiq`` loads only what a process
that pushes jobs needs, not the server package."""

from __future__ import annotations

import ast
import subprocess
import sys
from types import ModuleType

import pytest

import kiq
import kiq.api
import kiq.ext
import kiq.testing

KIQ = [
    "ArgumentError",
    "AsyncClient",
    "AsyncJobSetter",
    "Call",
    "Chain",
    "Client",
    "ClientMiddleware",
    "Config",
    "ConfigError",
    "Interrupted",
    "InvalidJobError",
    "InvalidPayload",
    "IterableJob",
    "IterationState",
    "Job",
    "JobArgumentError",
    "JobFunction",
    "JobSetter",
    "JobTimeout",
    "KiqError",
    "NotReplicated",
    "PayloadTooLarge",
    "PushBufferFull",
    "Queue",
    "RegistryError",
    "ServerMiddleware",
    "Shutdown",
    "Signature",
    "UnknownJobError",
    "Wrapper",
    "__version__",
    "cancel",
    "configure_client",
    "configure_server",
    "default_config",
    "hookimpl",
    "job",
    "registry",
]

EXT = [
    "ENQUEUE_LUA",
    "MOVED",
    "REFUSED",
    "TRANSIENT",
    "UNREACHABLE",
    "AttemptOutcome",
    "Backoff",
    "BatchFetch",
    "Capsule",
    "Fetched",
    "Fetcher",
    "JobObserver",
    "JobSource",
    "JobWriter",
    "Keyspace",
    "LuaScript",
    "QueueOrder",
    "Reading",
    "ResultTypeError",
    "Setting",
    "UnitOfWork",
    "check_job",
    "describe",
    "dumps",
    "enqueue_keys",
    "epoch_seconds",
    "error_class",
    "error_message",
    "hold_acknowledgement",
    "hold_write",
    "hookimpl",
    "hookspec",
    "keyspace",
    "loads",
    "lua_script",
    "master_generation",
    "new_jid",
    "new_public_id",
    "parse_payload",
    "pop_script",
    "popped_jobs",
    "report_failure",
    "result_form",
    "result_value",
    "run_pipeline",
    "wire_time",
]

# in both on purpose: an application that writes a plugin of its own decorates with @kiq.hookimpl (the docs' way), a
# plugin package may take everything from kiq.ext
IN_BOTH = {"hookimpl"}

API = [
    "HISTOGRAM_BOUNDS_MS",
    "HISTOGRAM_LABELS",
    "DeadSet",
    "JobClassMetrics",
    "JobMetricsSeries",
    "JobRecord",
    "JobSet",
    "Metrics",
    "MetricsReport",
    "MinuteMetrics",
    "Process",
    "ProcessSet",
    "Queue",
    "RetrySet",
    "ScheduledSet",
    "SearchResult",
    "SortedEntry",
    "Stats",
    "Work",
    "Workers",
    "cleanup_processes",
    "display_arguments",
    "iteration_states",
    "runtime_so_far",
    "shown_job",
]

TESTING = ["Fake", "Inline", "Worker", "disable", "fake", "inline", "jobs", "mode"]

SURFACES = [(kiq, KIQ), (kiq.ext, EXT), (kiq.api, API), (kiq.testing, TESTING)]
IDS = [module.__name__ for module, _ in SURFACES]


def isort_order(names: list[str]) -> list[str]:
    """ruff's order for ``__all__`` (RUF022): constants, then classes, then the rest, each alphabetical."""
    return sorted(names, key=lambda name: (0 if name.isupper() else 1 if name[:1].isupper() else 2, name))


def exposed(module: ModuleType) -> set[str]:
    """The public names ``module`` gives: what it defines, or re-exports when it is a package's face (kiq, kiq.ext,
    kiq.api); the submodules Python binds on a package, and the ``__future__`` switch, are no names of it."""
    names = set()
    for name in dir(module):
        value = getattr(module, name)
        if name.startswith("_") or isinstance(value, ModuleType) or type(value).__module__ == "__future__":
            continue
        if module is kiq.testing and getattr(value, "__module__", None) != module.__name__:
            continue  # an implementation module: what it imports to work with is not its surface
        names.add(name)
    return names


@pytest.mark.parametrize(("module", "expected"), SURFACES, ids=IDS)
def test_all_is_the_pinned_list_in_rufs_order(module: ModuleType, expected: list[str]) -> None:
    assert module.__all__ == expected, f"{module.__name__}.__all__ changed: update this test and the CHANGELOG"
    assert expected == isort_order(expected)


@pytest.mark.parametrize(("module", "expected"), SURFACES, ids=IDS)
def test_every_name_of_all_exists_and_every_public_name_is_in_all(module: ModuleType, expected: list[str]) -> None:
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == [], f"{module.__name__}.__all__ names what it does not have"
    assert exposed(module) - set(module.__all__) == set(), f"public names of {module.__name__} outside __all__"


def test_the_application_api_and_the_plugin_surface_are_apart() -> None:
    assert set(kiq.__all__) & set(kiq.ext.__all__) == IN_BOTH
    for name in IN_BOTH:
        assert getattr(kiq, name) is getattr(kiq.ext, name)


def test_a_moved_name_is_gone_from_kiq() -> None:
    for name in set(kiq.ext.__all__) - IN_BOTH:
        assert not hasattr(kiq, name), f"kiq.{name} still answers: it is kiq.ext.{name}"
    with pytest.raises(AttributeError, match="module 'kiq' has no attribute 'keyspace'"):
        kiq.keyspace  # noqa: B018  # the old spelling fails with Python's own message


def test_names_loaded_on_first_use_are_the_modules_own() -> None:
    from kiq.api.queue import Queue
    from kiq.iteration import IterableJob, IterationState, cancel

    assert (kiq.Queue, kiq.IterableJob, kiq.IterationState, kiq.cancel) == (Queue, IterableJob, IterationState, cancel)
    assert {"Queue", "IterableJob", "IterationState", "cancel"} <= set(dir(kiq))


def modules_after(code: str) -> list[str]:
    """The kiq.server modules a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in sys.modules if m.startswith('kiq.server')))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    modules: list[str] = ast.literal_eval(done.stdout)
    return modules


def test_importing_kiq_loads_no_server_module() -> None:
    assert modules_after("import kiq") == []


def test_defining_and_pushing_a_job_loads_no_server_module() -> None:
    """What an application's web process does: import kiq, define a job, configure a client (a push would connect)."""
    code = (
        "import kiq\n"
        "@kiq.job(queue='mail')\n"
        "def send(to: str) -> None: ...\n"
        "class Report(kiq.Job):\n"
        "    def perform(self) -> None: ...\n"
        "kiq.Config(redis_url='redis://127.0.0.1:1/0')\n"
    )
    assert modules_after(code) == []


def test_the_server_loads_with_the_api() -> None:
    """The probe can fail: the API does need the server package (its sets kill into the dead set)."""
    assert "kiq.server.dead" in modules_after("import kiq.api")
