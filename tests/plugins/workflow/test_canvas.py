"""Canvases run by the real Processor in this process: chains pass results on, groups give lists in order, chords
and nesting, ``.si``, ``.set(queue=...)``, the result and status reads."""

from __future__ import annotations

import decimal
import json
import time

import pytest

import kiq
import kiq.ext
import kiq.testing
from kiq.plugins import workflow
from kiq.plugins.workflow import chain, chord, group
from tests.jobs.workflow import Add, Collect, Const, Mul, Subtotal, Taxed, Total
from tests.tracking_support import work_off

from .conftest import drain


def test_a_chain_passes_each_result_as_the_first_argument(config: kiq.Config) -> None:
    wf = (Add.s(1, 2) | Mul.s(10) | Add.s(5)).perform_async()
    assert wf.status().state == "running"
    assert drain(config) == 3
    assert wf.result() == 35
    found = workflow.status(wf.id)
    assert found.state == "succeeded" and found.result == 35 and found.finished_at is not None
    assert [(s.step, s.state, s.result, s.after) for s in found.steps] == [
        ("0", "succeeded", 3, []),
        ("1", "succeeded", 30, ["0"]),
        ("2", "succeeded", 35, ["1"]),
    ]


def test_a_typed_result_passes_to_the_next_step_as_its_type(config: kiq.Config) -> None:
    wf = (Subtotal.s(1230) | Taxed.s("1.5")).perform_async()  # -> Decimal | Taxed(amount: Decimal, rate)
    assert drain(config) == 2
    assert workflow.status(wf.id).step("0").result == "12.3"  # stored in its JSON form
    assert wf.result() == decimal.Decimal("18.45")  # Taxed asserted it got a Decimal; its own comes back as one
    ends_in_a_group = (Subtotal.s(100) | group(Taxed.s("2"), Taxed.s("3"))).perform_async()
    assert drain(config) == 3
    assert ends_in_a_group.result() == [decimal.Decimal("2.00"), decimal.Decimal("3.00")]
    assert workflow.status(ends_in_a_group.id).result == ["2", "3"]  # the status keeps the JSON forms


def test_a_chord_gets_the_members_results_in_order(config: kiq.Config) -> None:
    wf = chord(group(Const.s(value) for value in range(5)), Total.s()).perform_async()
    drain(config)
    assert wf.result() == 10
    assert workflow.status(wf.id).step("1").after == ["0.0", "0.1", "0.2", "0.3", "0.4"]


def test_nesting_group_in_chain_chain_in_group_chord_in_chain(config: kiq.Config) -> None:
    canvas = chain(
        Add.s(1, 1),  # 2
        group(Mul.s(3), Add.s(1) | Mul.s(10), chord([Add.s(0), Add.s(1)], Total.s())),  # [6, 30, 5]
        Collect.s(),
    )
    wf = canvas.perform_async()
    drain(config)
    assert wf.result() == [6, 30, 5]


def test_a_signature_piped_into_a_chain_or_a_group(config: kiq.Config) -> None:
    into_chain = (Add.s(1, 1) | (Mul.s(3) | Add.s(1))).perform_async()
    into_group = (Add.s(1, 1) | group(Mul.s(3), Mul.s(4))).perform_async()
    drain(config)
    assert (into_chain.result(), into_group.result()) == (7, [6, 8])
    assert [step.step for step in into_chain.status().steps] == ["0", "1", "2"]  # the chains are one


def test_a_group_alone_results_in_its_list_and_si_takes_no_result(config: kiq.Config) -> None:
    wf = (group([Const.si("a"), Const.si("b")]) | Const.si("done")).perform_async()
    drain(config)
    assert wf.result() == "done"
    wf = group(Const.si(n) for n in range(3)).perform_async()
    drain(config)
    assert wf.result() == [0, 1, 2]


def test_set_queue_on_a_signature(config: kiq.Config) -> None:
    wf = (Const.si(1).set(queue="other") | Add.s(1)).perform_async()
    assert config.redis.llen("queue:other") == 1
    drain(config, "other")
    drain(config)
    assert wf.result() == 2
    assert [step.queue for step in wf.status().steps] == ["other", "default"]


def test_floats_and_unicode_pass_exactly(config: kiq.Config) -> None:
    value = {"x": 0.1 + 0.2, "big": 2**62 + 1, "text": "héllo \u2603"}
    wf = (Const.si(value) | Const.s()).perform_async()
    drain(config)
    assert wf.result() == value


def test_a_bad_argument_names_the_step_and_pushes_nothing(config: kiq.Config) -> None:
    with pytest.raises(workflow.WorkflowError, match=r"workflow step 1 WfAdd|workflow step 1 Add\.s"):
        (Const.si(1) | Add.s({1, 2})).perform_async()
    with pytest.raises(workflow.WorkflowError, match="workflow step 0"):
        (Add.s(1, 2, 3, 4) | Const.s()).perform_async()
    assert config.redis.llen("queue:default") == 0
    with pytest.raises(workflow.WorkflowError, match="at least one"):
        group([])
    with pytest.raises(workflow.WorkflowError, match="leave shard out"):
        (Const.si(1) | Add.set(shard="eu").s(1)).perform_async()
    with pytest.raises(workflow.WorkflowError, match="outermost canvas"):
        chain(Const.si(1), (Const.si(2) | Const.s()).on_error(Const.s())).perform_async()
    with kiq.testing.fake(), pytest.raises(workflow.WorkflowError, match=r"kiq\.testing\.disable"):
        (Const.si(1) | Add.s(1)).perform_async()
    with pytest.raises(workflow.WorkflowError, match="not a step"):
        chain(Const.si(1), "Add")


@pytest.mark.parametrize(("wire", "form"), [(7, float), (8, int)])
def test_a_step_pushed_by_the_program_has_enqueued_at_in_the_sidekiq_wire_form(
    config: kiq.Config, wire: int, form: type
) -> None:
    """The step program stamps a successor's ``enqueued_at`` as the push path does: float seconds, or Sidekiq 8's
    integer ms (its own times, such as ``finished_at``, stay seconds)."""
    config.sidekiq_wire = wire
    before = time.time()
    wf = (Add.s(1, 2) | Add.s(5).set(queue="next")).perform_async()
    assert work_off(config) == 1  # the first step: its success pushes the second
    [successor] = [json.loads(raw) for raw in config.redis.lrange("queue:next", 0, -1)]
    stamp = successor["enqueued_at"]
    assert type(stamp) is form and before <= kiq.ext.epoch_seconds(stamp) <= time.time()  # type: ignore[operator]
    assert drain(config, "next") == 1 and wf.result() == 8
    finished = workflow.status(wf.id).finished_at
    assert finished is not None and before <= finished <= time.time()
