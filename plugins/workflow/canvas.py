"""The canvas: ``chain``, ``group`` and ``chord`` of signatures (``MyJob.s(...)``), nested at will, and ``|``
between them (Celery's canvas). A canvas is a plain description; ``perform_async()`` starts it as a workflow
(``start.py``) and returns its handle."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeAlias

import kiq

from .errors import WorkflowError
from .graph import Step, place
from .handle import Workflow
from .shape import Shape, steps_of
from .start import start, start_async

Node: TypeAlias = "kiq.Signature | Chain | Group | Chord"


def node(value: object, where: str) -> Node:
    if isinstance(value, (kiq.Signature, Chain, Group, Chord)):
        return value
    raise WorkflowError(
        f"{where}: {value!r:.80} is not a step; give a signature (MyJob.s(...), MyJob.si(...)) or a chain, group "
        "or chord of them"
    )


class Canvas:
    """What every canvas shares: ``|``, ``on_error``, ``perform_async`` and ``aio.perform_async``."""

    error_handler: kiq.Signature | None = None

    def on_error(self, handler: kiq.Signature) -> Any:
        """A copy of this canvas that runs ``handler`` once if a step dies (its retries exhausted, or killed):
        ``Handler.s(...)`` gets ``(workflow_id, jid, error)`` before its own arguments, ``error`` being
        ``{"jid", "class", "message"}``; ``Handler.si(...)`` gets only its own."""
        if not isinstance(handler, kiq.Signature):
            raise WorkflowError(f"on_error takes a signature, e.g. Handler.s(), got {handler!r:.80}")
        copy = self._copy()
        copy.error_handler = handler
        return copy

    def _copy(self) -> Any:
        raise NotImplementedError

    def __or__(self, other: object) -> Any:
        return Chain(self, node(other, "a | b"))

    def __ror__(self, other: object) -> Any:
        return Chain(node(other, "a | b"), self)

    def perform_async(self, config: kiq.Config | None = None) -> Workflow:
        """Start the workflow: every step checked and its payload built, the graph written, the first steps
        pushed (one round trip per 1,000 steps). Returns its handle."""
        steps: list[Step] = []
        return start(steps, self.add(steps, "", None, top=True), self.error_handler, config)

    def add(self, steps: list[Step], path: str, given: Shape | None, top: bool = False) -> Shape:
        """Append this canvas's steps (ids under ``path``, the first ones given ``given``); its result's shape."""
        if not top and self.error_handler is not None:
            raise WorkflowError(
                f"{self!r:.120}: on_error applies to a whole workflow; call it on the outermost canvas instead"
            )
        return self._add(steps, path, given)

    def _add(self, steps: list[Step], path: str, given: Shape | None) -> Shape:
        raise NotImplementedError

    @property
    def aio(self) -> AsyncStart:
        return AsyncStart(self)


class AsyncStart:
    """``await canvas.aio.perform_async()``: the same start, written without blocking the event loop."""

    def __init__(self, canvas: Canvas) -> None:
        self.canvas = canvas

    async def perform_async(self, config: kiq.Config | None = None) -> Workflow:
        steps: list[Step] = []
        shape = self.canvas.add(steps, "", None, top=True)
        return await start_async(steps, shape, self.canvas.error_handler, config)


class Chain(Canvas):
    """Steps one after the other; each ``.s`` step gets the result of the one before as its first argument (a
    list of results after a group). Its result is its last step's."""

    def __init__(self, *steps: object) -> None:
        if len(steps) == 1 and not isinstance(steps[0], (kiq.Signature, Canvas)) and isinstance(steps[0], Iterable):
            steps = tuple(steps[0])  # chain([a, b]) as chain(a, b)
        flat: list[Node] = []
        for index, step in enumerate(steps):
            found = node(step, f"chain step {index}")
            flat.extend(found.steps if isinstance(found, Chain) and found.error_handler is None else [found])
        if not flat:
            raise WorkflowError("chain() needs at least one step")
        self.steps: list[Node] = flat

    def _copy(self) -> Chain:
        return Chain(*self.steps)

    def _add(self, steps: list[Step], path: str, given: Shape | None) -> Shape:
        for index, part in enumerate(self.steps):
            given = add(part, steps, place(path, index), given)
        assert given is not None
        return given

    def __repr__(self) -> str:
        return " | ".join(repr(step) for step in self.steps)


class Group(Canvas):
    """Steps run in parallel, each given the same previous result; its result is the list of theirs, in order.
    ``group | body`` is a chord."""

    def __init__(self, members: Iterable[object], *more: object) -> None:
        given = [members, *more] if more or isinstance(members, (kiq.Signature, Canvas)) else list(members)
        self.members: list[Node] = [node(member, f"group member {index}") for index, member in enumerate(given)]
        if not self.members:
            raise WorkflowError("group() needs at least one member")

    def __or__(self, other: object) -> Any:
        return Chord(self, node(other, "group | body"))

    def _copy(self) -> Group:
        return Group(self.members)

    def _add(self, steps: list[Step], path: str, given: Shape | None) -> Shape:
        return [add(member, steps, place(path, index), given) for index, member in enumerate(self.members)]

    def __repr__(self) -> str:
        return f"group({', '.join(repr(member) for member in self.members)})"


class Chord(Canvas):
    """A group, then ``body`` with the list of its results, once every member succeeded. ``allow_failures``: the
    body runs even when members died, with None in their places (their errors are in the workflow's status)."""

    def __init__(self, header: Iterable[object] | Group, body: object, allow_failures: bool = False) -> None:
        self.header = header if isinstance(header, Group) else Group(header)
        self.body = node(body, "chord body")
        self.allow_failures = allow_failures

    def _copy(self) -> Chord:
        return Chord(self.header, self.body, self.allow_failures)

    def _add(self, steps: list[Step], path: str, given: Shape | None) -> Shape:
        header = self.header.add(steps, place(path, 0), given)
        if self.allow_failures:  # the members the body waits for may die: None in their places
            terminal = set(steps_of(header))
            for step in steps:
                step.tolerant = step.tolerant or step.id in terminal
        return add(self.body, steps, place(path, 1), header)

    def __repr__(self) -> str:
        return f"chord({self.header!r}, {self.body!r})"


def add(item: Node, steps: list[Step], path: str, given: Shape | None) -> Shape:
    """Append ``item``'s steps (see ``Canvas.add``); a signature is one step."""
    if isinstance(item, kiq.Signature):
        step_id = path or "0"
        receives = None if item.immutable else given
        steps.append(Step(step_id, item, [] if given is None else steps_of(given), receives))
        return step_id
    return item.add(steps, path, given)


def chain(*steps: object) -> Chain:
    """``chain(a, b, c)`` (or ``a | b | c``): see ``Chain``."""
    return Chain(*steps)


def group(members: Iterable[object], *more: object) -> Group:
    """``group([a, b])``, ``group(a, b)`` or a generator of signatures: see ``Group``."""
    return Group(members, *more)


def chord(header: Iterable[object] | Group, body: object, allow_failures: bool = False) -> Chord:
    """``chord(group, body)`` (or ``group | body``): see ``Chord``."""
    return Chord(header, body, allow_failures)
