"""A waiting step's payload as pieces the step script joins when it pushes the step: ``"L<text>"`` (literal JSON
text), ``"R<step id>"`` (that step's result, ``null`` if it has none) and ``"E"`` (the text the script was given:
an on_error handler's ``workflow_id, jid, error``). The last piece leaves the payload's closing brace out: the
script closes it with ``enqueued_at``, the time of the push.

Joining text, not decoding and encoding JSON in Lua, keeps every value exactly as the step returned it (Lua's cjson
would round floats to 14 digits)."""

from __future__ import annotations

import json
from typing import Any

import kiq
import kiq.ext

from .errors import WorkflowError
from .shape import Shape

Pieces = list[str]


def compact(value: Any) -> str:
    """JSON text of what the plugin writes itself (graph entries, pieces, errors), compact."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def input_pieces(shape: Shape) -> Pieces:
    """The pieces that write the value of ``shape``: a step's result, or a JSON list of them (nested)."""
    if isinstance(shape, str):
        return ["R" + shape]
    pieces: Pieces = ["L["]
    for index, part in enumerate(shape):
        if index:
            pieces.append("L,")
        pieces.extend(input_pieces(part))
    pieces.append("L]")
    return pieces


def split_payload(payload: str, stand_in: str | None, given: Pieces | None) -> Pieces:
    """``payload`` (a JSON object as encoded for the push) as pieces: its ``enqueued_at`` dropped (the push sets
    it), the stand-in argument replaced by ``given``."""
    job = kiq.ext.loads(payload)
    job.pop("enqueued_at", None)
    text = kiq.ext.dumps(job)
    assert text.endswith("}")
    text = text[:-1]
    if stand_in is None or given is None:
        return ["L" + text]
    before, found, after = text.partition(f'"{stand_in}"')
    if not found or after.find(f'"{stand_in}"') >= 0:
        raise WorkflowError(f"a client middleware changed the step's arguments: {kiq.ext.dumps(job):.200}")
    return ["L" + before, *given, "L" + after]
