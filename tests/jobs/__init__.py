"""Job modules that tests import into worker processes with -r."""

from __future__ import annotations

from typing import Any


def deep(levels: int) -> list[Any]:
    """A list nested ``levels`` deep: formatting or encoding it recursively raises RecursionError."""
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value
