"""Job classes: options inherit and are checked, wire names, and the registry that payloads are resolved in."""

from __future__ import annotations

from typing import Any

import pytest

import kiq
from kiq.job import JobRegistry


class Base(kiq.Job, abstract=True):
    kiq_options = {"queue": "base", "retry": 3}


class Child(Base):
    kiq_options = {"retry": False, "track": True}

    def perform(self) -> None: ...


def test_options_inherit_and_merge() -> None:
    assert Child.get_options() == {"retry": False, "queue": "base", "track": True}
    assert "tests.test_job.Base" not in kiq.registry  # abstract bases are not registered


def test_default_wire_name_is_module_and_qualname() -> None:
    assert Child.kiq_name == "tests.test_job.Child"
    assert kiq.registry.get("tests.test_job.Child") is Child


def test_unknown_name_is_an_error_not_an_import() -> None:
    with pytest.raises(kiq.UnknownJobError, match=r"os\.system"):
        kiq.registry.get("os.system")


@pytest.mark.parametrize(
    "options",
    [{"queue": ""}, {"retry": -1}, {"retry": "yes"}, {"dead": "no"}, {"retry_for": 0}, {"tags": "a"}],
)
def test_bad_options_fail_at_class_definition(options: dict[str, Any]) -> None:
    with pytest.raises(kiq.ConfigError, match="option"):
        type("Bad", (kiq.Job,), {"kiq_options": options, "__module__": __name__})
    with pytest.raises(kiq.ConfigError, match="option"):
        Child.set(**options)


def test_two_jobs_cannot_share_a_wire_name() -> None:
    registry = JobRegistry()

    class One(kiq.Job, abstract=True):
        kiq_name = "Shared"

    class Two(kiq.Job, abstract=True):
        kiq_name = "Shared"

    registry.register(One)
    registry.register(One)  # the same class again is fine
    with pytest.raises(kiq.RegistryError, match="Shared"):
        registry.register(Two)


def test_redefining_the_same_class_replaces_it() -> None:
    registry = JobRegistry()
    first = type("Again", (kiq.Job,), {"__module__": "m", "kiq_name": "m.Again"})
    second = type("Again", (kiq.Job,), {"__module__": "m", "kiq_name": "m.Again"})
    registry.register(first)
    registry.register(second)
    assert registry.get("m.Again") is second
    kiq.registry.unregister("m.Again")


def test_setter_chains_options(config: kiq.Config) -> None:
    setter = Child.set(queue="a").set(retry=2)
    assert setter.options == {"queue": "a", "retry": 2}
    jid = setter.perform_async()
    assert jid is not None and config.redis.llen("queue:a") == 1
