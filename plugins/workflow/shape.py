"""The shape of a canvas's result: a step id (that step's value) or a list of shapes (a group's values, in order).
A step that follows a canvas receives its result in this shape; the workflow's own result is its canvas's."""

from __future__ import annotations

from typing import Any, TypeAlias

Shape: TypeAlias = str | list["Shape"]


def resolve(shape: Shape, values: dict[str, Any]) -> Any:
    """The value of ``shape`` given the steps' ``values`` (None for a step without one)."""
    if isinstance(shape, str):
        return values.get(shape)
    return [resolve(part, values) for part in shape]


def steps_of(shape: Shape) -> list[str]:
    """The step ids in ``shape``, in order: the steps a successor waits for."""
    if isinstance(shape, str):
        return [shape]
    return [step for part in shape for step in steps_of(part)]
