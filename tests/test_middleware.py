"""Chain: Sidekiq's ordering API, generator middleware, halting, and exceptions through the layers."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import redis
from mypy import api as mypy_api

import kiq
from kiq.middleware import Chain


def make(name: str, log: list[str]) -> type:
    class Layer:
        def __init__(self, tag: str = "") -> None:
            self.tag = tag

        def call(self, *args: Any) -> Generator[None, Any, None]:
            log.append(f">{name}{self.tag}")
            yield
            log.append(f"<{name}{self.tag}")

    Layer.__name__ = name
    return Layer


@pytest.fixture
def log() -> list[str]:
    return []


def order(chain: Chain[Any]) -> list[str]:
    return [klass.__name__ for klass in chain]


def test_add_appends_and_readding_moves_to_the_end(log: list[str]) -> None:
    a, b, c = make("A", log), make("B", log), make("C", log)
    chain: Chain[Any] = Chain()
    chain.add(a)
    chain.add(b)
    chain.add(c)
    assert order(chain) == ["A", "B", "C"]
    chain.add(a, "x")
    assert order(chain) == ["B", "C", "A"]
    assert chain.entries[-1].args == ("x",)


def test_prepend_insert_before_after_remove_exists_clear(log: list[str]) -> None:
    a, b, c, d = (make(n, log) for n in "ABCD")
    chain: Chain[Any] = Chain()
    chain.add(a)
    chain.add(b)
    chain.prepend(c)
    assert order(chain) == ["C", "A", "B"]
    chain.insert_before(b, d)
    assert order(chain) == ["C", "A", "D", "B"]
    chain.insert_after(c, b)  # moves an existing entry
    assert order(chain) == ["C", "B", "A", "D"]
    chain.insert_before(make("Missing", log), a)  # unknown anchor: first
    assert order(chain) == ["A", "C", "B", "D"]
    chain.insert_after(make("Missing", log), c)  # unknown anchor: last
    assert order(chain) == ["A", "B", "D", "C"]
    assert chain.exists(d) and d in chain
    chain.remove(d)
    assert not chain.exists(d) and len(chain) == 3
    chain.clear()
    assert order(chain) == []


def test_insert_keeps_existing_arguments_like_sidekiq(log: list[str]) -> None:
    a, b = make("A", log), make("B", log)
    chain: Chain[Any] = Chain()
    chain.add(a, "first")
    chain.add(b)
    chain.insert_after(b, a, "ignored")
    assert chain.entries[-1].args == ("first",)


def test_entries_zero_is_outermost(log: list[str]) -> None:
    chain: Chain[Any] = Chain()
    chain.add(make("A", log))
    chain.add(make("B", log), "!")
    result = chain.invoke((), lambda: log.append("core") or "done")
    assert result == "done"
    assert log == [">A", ">B!", "core", "<B!", "<A"]


def test_layer_that_does_not_yield_halts(log: list[str]) -> None:
    class Stop:
        def call(self, *args: Any) -> Generator[None, Any, None]:
            log.append("stop")
            return
            yield  # a generator that never reaches its yield

    chain: Chain[Any] = Chain()
    chain.add(make("A", log))
    chain.add(Stop)
    chain.add(make("C", log))
    assert chain.invoke((), lambda: log.append("core")) is None
    assert log == [">A", "stop", "<A"]


def test_exception_flows_out_through_layers(log: list[str]) -> None:
    seen: list[str] = []

    class Watch:
        def call(self, *args: Any) -> Generator[None, Any, None]:
            try:
                yield
            except ValueError as exc:
                seen.append(str(exc))
                raise

    chain: Chain[Any] = Chain()
    chain.add(Watch)
    chain.add(make("B", log))

    def boom() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        chain.invoke((), boom)
    assert seen == ["boom"]
    assert log == [">B"]  # B's code after yield does not run: the error passes through


def test_swallowed_exception_counts_as_handled() -> None:
    class Swallow:
        def call(self, *args: Any) -> Generator[None, Any, None]:
            with contextlib.suppress(RuntimeError):
                yield

    chain: Chain[Any] = Chain()
    chain.add(Swallow)

    def fail() -> str:
        raise RuntimeError

    assert chain.invoke((), fail) is None


def test_non_generator_middleware_is_refused() -> None:
    class Plain:
        def call(self, *args: Any) -> None:
            pass

    with pytest.raises(TypeError, match="generator"):
        Chain().add(Plain)


def test_middleware_gets_config_and_is_built_once(config: kiq.Config) -> None:
    built: list[object] = []

    class Once(kiq.ServerMiddleware):
        def __init__(self) -> None:
            built.append(self)

        def call(self, job_instance: Any, job: dict[str, Any], queue: str) -> Generator[None, Any, None]:
            assert self.config is config
            yield

    config.server_middleware.add(Once)
    for _ in range(3):
        config.server_middleware.invoke((None, {}, "q"), lambda: None)
    assert len(built) == 1


class Plain(kiq.Job):
    def perform(self, *args: Any) -> None: ...


def test_client_middleware_halts_push(config: kiq.Config, r: redis.Redis) -> None:
    class DropOdd(kiq.ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Generator[None, Any, None]:
            assert job_class is Plain and queue == "default" and redis is config.redis
            if job["args"][0] % 2 == 0:
                yield

    config.client_middleware.add(DropOdd)
    assert Plain.perform_async(1) is None
    assert Plain.perform_async(2) is not None
    assert r.llen("queue:default") == 1
    jids = Plain.perform_bulk([[1], [2], [3], [4]])
    assert jids[0] is None and jids[2] is None and jids[1] and jids[3]
    assert r.llen("queue:default") == 3


def test_client_middleware_can_add_payload_keys(config: kiq.Config, r: redis.Redis) -> None:
    class Stamp(kiq.ClientMiddleware):
        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Generator[None, Any, None]:
            job["tenant"] = "acme"
            yield

    config.client_middleware.add(Stamp)
    Plain.perform_async()
    assert '"tenant":"acme"' in r.lindex("queue:default", 0)  # type: ignore[operator]


def test_an_inactive_layer_sits_out_pushes_and_jobs_and_an_active_one_runs_again(
    config: kiq.Config, r: redis.Redis
) -> None:
    class Switch:  # what a property reads: e.g. whether an SDK is there to record anything
        on = False

    class Stamp(kiq.ClientMiddleware):
        @property
        def active(self) -> bool:  # type: ignore[override]
            return Switch.on

        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Generator[None, Any, None]:
            job["stamped"] = True
            yield

    ran: list[str] = []

    class Around(kiq.ServerMiddleware):
        active = False

        def call(self, job_instance: Any, job: dict[str, Any], queue: str) -> Generator[None, Any, None]:
            ran.append("around")
            yield

    config.client_middleware.add(Stamp)
    config.server_middleware.add(Around)
    Plain.perform_async()
    Plain.perform_bulk([[]])
    Switch.on = True
    Plain.perform_async()
    stamped = ['"stamped":true' in job for job in r.lrange("queue:default", 0, -1)]  # type: ignore[union-attr]
    assert stamped == [True, False, False]  # newest first: only the push made while it was active
    job = Plain()
    assert config.server_middleware.invoke((job, {"class": "Plain", "args": []}, "default"), lambda: "done") == "done"
    assert ran == []
    Around.active = True
    config.server_middleware.invoke((job, {"class": "Plain", "args": []}, "default"), lambda: "done")
    assert ran == ["around"]


def test_a_layer_only_with_an_option_sits_out_the_jobs_without_it(config: kiq.Config, r: redis.Redis) -> None:
    """``only_with``: a push or a job whose payload lacks the option passes the layer by with one look-up, its
    ``call`` never made; the layers around it run as usual, in order."""
    ran: list[str] = []

    class Stamp(kiq.ClientMiddleware):
        only_with = "audit"

        def call(self, job_class: Any, job: dict[str, Any], queue: str, redis: Any) -> Generator[None, Any, None]:
            job["stamped"] = True
            yield

    class Audit(kiq.ServerMiddleware):
        only_with = "audit"

        def call(self, job_instance: Any, job: dict[str, Any], queue: str) -> Generator[None, Any, None]:
            ran.append(f">audit {job['audit']}")
            yield
            ran.append("<audit")

    class Outer(kiq.ServerMiddleware):
        def call(self, job_instance: Any, job: dict[str, Any], queue: str) -> Generator[None, Any, None]:
            ran.append(">outer")
            yield
            ran.append("<outer")

    config.client_middleware.add(Stamp)
    config.server_middleware.add(Outer)
    config.server_middleware.add(Audit)
    Plain.perform_async()
    Plain.set(audit="ana").perform_async()
    stamped = ['"stamped":true' in job for job in r.lrange("queue:default", 0, -1)]  # type: ignore[union-attr]
    assert stamped == [True, False]  # newest first
    chain, job = config.server_middleware, Plain()
    assert chain.invoke((job, {"class": "Plain", "args": []}, "default"), lambda: "done") == "done"
    assert ran == [">outer", "<outer"]
    ran.clear()
    assert chain.invoke((job, {"class": "Plain", "args": [], "audit": "bo"}, "default"), lambda: "done") == "done"
    assert ran == [">outer", ">audit bo", "<audit", "<outer"]


def test_the_chains_are_typed_so_mypy_catches_the_wrong_middleware_or_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server middleware in the client chain, and constructor arguments that do not match, are type errors."""
    view = tmp_path / "view"
    view.mkdir()
    (view / "kiq").symlink_to(Path(kiq.__file__).parent, target_is_directory=True)  # the package as `import kiq`
    monkeypatch.setenv("MYPYPATH", str(view))
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        textwrap.dedent(
            """\
            import kiq

            class Timing(kiq.ServerMiddleware):
                def __init__(self, level: str) -> None:
                    self.level = level

            class Stamp(kiq.ClientMiddleware):
                pass

            config = kiq.Config()
            config.server_middleware.add(Timing, "info")  # fine
            config.client_middleware.add(Stamp)  # fine
            config.client_middleware.add(Timing, "info")  # a server middleware in the client chain
            config.server_middleware.add(Timing, level=3)  # a wrong argument type
            config.server_middleware.add(Timing)  # a missing argument
            """
        )
    )
    out, _, status = mypy_api.run(["--strict", "--cache-dir", str(tmp_path / "cache"), str(snippet)])
    lines = sorted({int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line})
    assert status == 1 and lines == [13, 14, 15], out


class Takes(kiq.Job):
    kiq_name = "MiddlewareTakes"

    def perform(self, *args: Any, **kwargs: Any) -> None:
        TAKEN.append([list(args), kwargs])


TAKEN: list[list[Any]] = []


def test_a_server_middleware_may_give_the_job_other_arguments_before_its_yield(config: kiq.Config) -> None:
    """What perform gets is read when it is called (an encrypted argument, opened by a layer, is the use): in a
    worker's steps (a fake's drain runs them) and inline; the payload as stored is unchanged."""

    class Replace(kiq.ServerMiddleware):
        def call(self, job_instance: Any, job: dict[str, Any], queue: str) -> Generator[None, Any, None]:
            stored = job["args"], job.get("kwargs")
            job["args"], job["kwargs"] = ["clear"], {"key": "clear"}
            try:
                yield
            finally:
                job["args"], job["kwargs"] = stored

    config.server_middleware.add(Replace)
    TAKEN.clear()
    with kiq.testing.fake(config) as captured:
        Takes.perform_async("sealed", key="sealed")
        stored = list(captured.queues["default"])
        captured.drain()
    with kiq.testing.inline(config):
        Takes.perform_async("sealed")
    assert TAKEN == [[["clear"], {"key": "clear"}]] * 2
    assert '"args":["sealed"]' in stored[0] and '"kwargs":{"key":"sealed"}' in stored[0]
