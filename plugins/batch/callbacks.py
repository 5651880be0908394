"""A batch's callbacks: jobs, given as ``(JobClass, [args])`` or ``(JobClass, kiq.Call(*args, **kwargs))`` (or a
``JobSetter`` for options, a ``@kiq.job``
function, a wire name), whose payloads are built when the batch is created and pushed by the batch's Lua program
when the event fires.

The payload is made by kiq's own client, so it is checked like any push (the argument count, strict JSON) and
nothing is written when it is refused; but it is encoded on a config without middleware, because the push itself
happens later inside Redis, where no client middleware can run (see the README's limits). The ``at`` given to the
encoding only keeps ``enqueued_at`` out of the JSON: the program adds it when it pushes the job.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import kiq

Target: TypeAlias = type[kiq.Job] | kiq.JobFunction[..., Any] | kiq.JobSetter | str
Callback: TypeAlias = Target | tuple[Target, list[Any] | kiq.Call]

_FAR_FUTURE = 4_102_444_800.0  # encoded as a scheduled job: no enqueued_at in the JSON (it is never scheduled)
_encoder: kiq.Client | None = None


def _bare_client() -> kiq.Client:
    """A client of a config with no plugins and no middleware: it normalizes, checks and encodes, and never writes."""
    global _encoder
    if _encoder is None:
        _encoder = kiq.Client(kiq.Config())
    return _encoder


def callback_item(callback: Callback) -> dict[str, Any]:
    """The push item of a callback: ``JobClass``, ``(JobClass, args)``, ``(JobClass, kiq.Call(...))``,
    ``JobClass.set(...)``, ``(setter, args)``, a ``@kiq.job`` function, or a wire name."""
    target, args = callback if isinstance(callback, tuple) else (callback, [])
    arguments: dict[str, Any] = {"args": args}
    if isinstance(args, kiq.Call):  # keyword arguments too; typed values are converted by the push's encoding
        arguments = {"args": list(args.args), "kwargs": args.kwargs} if args.kwargs else {"args": list(args.args)}
    elif not isinstance(args, list):
        raise TypeError(
            f"a batch callback is (job, [args]) or (job, kiq.Call(...)): its arguments must be a list, got {args!r:.80}"
        )
    if isinstance(target, str):
        return {"class": target, **arguments}
    if isinstance(target, kiq.JobFunction):
        target = target.set()
    if isinstance(target, kiq.JobSetter):
        return {**target.options, "class": target.job_class, **arguments}  # the class's options come under these
    if isinstance(target, type) and issubclass(target, kiq.Job):
        return {"class": target, **arguments}
    raise TypeError(f"a batch callback is a job class, a JobSetter, a @kiq.job function or a wire name: {target!r:.80}")


def encode_callback(item: dict[str, Any], event: str, bid: str, parent: str | None) -> tuple[str, str, str]:
    """``(queue, jid, JSON)`` of a callback for ``event`` of batch ``bid``: the payload says which batch and event
    fired it (``batch_callback``), and belongs to the ``parent`` batch, if any (its ``bid``)."""
    fields: dict[str, Any] = {**item, "batch_callback": {"bid": bid, "event": event}, "at": _FAR_FUTURE}
    if parent is not None:
        fields["bid"] = parent
    encoded = _bare_client().encode(fields)
    assert encoded is not None  # a config without middleware never drops a job
    queue, jid, _, payload = encoded
    return queue, jid, payload
