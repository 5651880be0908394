"""A canvas as a graph of steps: each step's id (its place in the canvas: "0", "1.2"), the steps it waits for and
the shape of the result it is given (``shape.py``). The canvas classes add their steps (``Canvas.add``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import kiq

from .shape import Shape


@dataclass
class Step:
    """One job of the workflow. ``given``: the shape of the previous result it receives as its first argument
    (None for a first step or an ``si`` one); ``tolerant``: its death does not fail the workflow (a member of a
    chord with ``allow_failures``), its result is None."""

    id: str
    signature: kiq.Signature
    after: list[str]
    given: Shape | None
    tolerant: bool = False
    next: list[str] = field(default_factory=list)


def place(path: str, index: int) -> str:
    """The id of the ``index``-th part of the canvas at ``path``."""
    return f"{path}.{index}" if path else str(index)


def link(steps: list[Step]) -> None:
    """Fill each step's ``next``: the steps that wait for it."""
    by_id = {step.id: step for step in steps}
    for step in steps:
        for before in step.after:
            by_id[before].next.append(step.id)
