"""``kiq.Signature``: ``Job.s`` / ``Job.si`` describe a call for later (with ``.set`` options), and ``|`` between two
asks the ``kiq_compose`` hook, refusing with the plugin to enable when no plugin composes."""

from __future__ import annotations

import pytest

import kiq
from kiq.plugins.workflow import Chain, WorkflowPlugin
from tests.jobs.workflow import Add, Mul


@kiq.job(queue="mail")
def notify(value: int) -> None:
    pass


def test_s_and_si_describe_a_call_with_its_options() -> None:
    made = Add.s(1, right=2)
    assert (made.job_class, made.args, made.kwargs, made.options, made.immutable) == (
        Add,
        (1,),
        {"right": 2},
        {},
        False,
    )
    assert Add.si(1).immutable and not Add.s(1).immutable
    low = made.set(queue="low").set(retry=3)
    assert low.options == {"queue": "low", "retry": 3} and made.options == {}
    assert Add.set(queue="low").s(1) == Add.s(1).set(queue="low")
    assert notify.s(3) == kiq.Signature(notify.job_class, (3,))
    assert repr(low) == "Add.s(1, right=2).set(queue='low', retry=3)"
    assert repr(Add.si()) == "Add.si()"


def test_set_refuses_a_wrong_option_at_once() -> None:
    with pytest.raises(kiq.ConfigError, match="queue"):
        Add.s(1).set(queue=7)


def test_a_pipe_without_a_composing_plugin_says_which_to_enable(config: kiq.Config) -> None:
    with pytest.raises(TypeError, match=r"plugins = \['workflow'\]"):
        Add.s(1) | Mul.s(2)


def test_a_pipe_asks_the_kiq_compose_hook(config: kiq.Config) -> None:
    config.add_plugin(WorkflowPlugin)
    composed = Add.s(1) | Mul.s(2)
    assert isinstance(composed, Chain) and composed.steps == [Add.s(1), Mul.s(2)]
