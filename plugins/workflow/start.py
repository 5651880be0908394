"""Starting a workflow: every step checked and encoded through the client middleware first (a bad argument
anywhere pushes nothing), then the graph written and the first steps pushed, 1,000 steps per round trip.

A waiting step's payload is kept as pieces (``pieces.py``) that the step script joins with the results it waits
for when it pushes the step; the first steps are pushed as they are. The graph is written before any step is
pushed, so a step that finishes at once finds it.

A start Redis refuses part way (maxmemory's OOM, an outage) is taken back: the workflow's keys deleted and the
steps it pushed removed from their queues (neither needs memory), then ``WorkflowError`` says so. A first step a
worker took in between runs as a step of a workflow that no longer exists: it records nothing and pushes nothing."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import redis as redis_py

import kiq
import kiq.ext
import kiq.testing

from .errors import WorkflowError
from .graph import Step, link
from .handle import Workflow
from .keys import all_keys, index_key, new_workflow_id, workflow_key
from .pieces import Pieces, compact, input_pieces, split_payload
from .shape import Shape

BATCH = 1000  # steps per round trip
QUEUES = "queues"  # the set of queue names a push adds its queue to (Sidekiq's)
HANDLER_INPUTS = 3  # an on_error handler's .s() gets (workflow id, jid, error)


@dataclass
class Encoded:
    step: Step
    queue: str
    jid: str
    payload: str  # a first step's full payload
    pieces: Pieces | None  # a waiting step's payload, to be joined


def start(
    steps: list[Step], result: Shape, handler: kiq.Signature | None, config: kiq.Config | None = None
) -> Workflow:
    """Start the workflow of ``steps`` (a canvas's, ``Canvas.add``) whose result is ``result``."""
    config = config or kiq.default_config()
    redis = config.redis
    keys = kiq.ext.keyspace(redis)
    workflow_id, encoded, batches = _prepare(steps, result, handler, config, keys)
    try:
        for commands in batches:
            kiq.ext.run_pipeline(redis, commands)
    except redis_py.RedisError as error:
        undo = _undo_commands(keys, workflow_id, encoded)
        raise _taken_back(workflow_id, error, lambda: kiq.ext.run_pipeline(redis, undo)) from error
    return Workflow(workflow_id, config)


async def start_async(
    steps: list[Step], result: Shape, handler: kiq.Signature | None, config: kiq.Config | None = None
) -> Workflow:
    """``start`` without blocking the event loop on Redis."""
    config = config or kiq.default_config()
    redis = kiq.AsyncClient(config).redis
    keys = kiq.ext.keyspace(redis)
    workflow_id, encoded, batches = _prepare(steps, result, handler, config, keys)
    try:
        for commands in batches:
            pipe = redis.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            await pipe.execute()
    except redis_py.RedisError as error:
        undo = _undo_commands(keys, workflow_id, encoded)
        try:
            pipe = redis.pipeline(transaction=False)
            for command in undo:
                pipe.execute_command(*command)
            await pipe.execute()
        except redis_py.RedisError as undo_error:
            raise _start_refused(workflow_id, error, undo_error) from error
        raise _start_refused(workflow_id, error, None) from error
    return Workflow(workflow_id, config)


def _undo_commands(keys: kiq.ext.Keyspace, workflow_id: str, encoded: list[Encoded]) -> list[tuple[Any, ...]]:
    """What takes a start back: the workflow's keys, its index entry and the first steps it may have pushed."""
    pushed = [("LREM", keys.queue(item.queue), 1, item.payload) for item in encoded if item.pieces is None]
    return [("DEL", *all_keys(keys, workflow_id)), ("ZREM", index_key(keys), workflow_id), *pushed]


def _taken_back(workflow_id: str, error: redis_py.RedisError, undo: Callable[[], object]) -> WorkflowError:
    try:
        undo()
    except redis_py.RedisError as undo_error:
        return _start_refused(workflow_id, error, undo_error)
    return _start_refused(workflow_id, error, None)


def _start_refused(workflow_id: str, error: BaseException, undo_error: BaseException | None) -> WorkflowError:
    if undo_error is None:
        left = "nothing of it was left in Redis (its keys deleted, the steps it pushed taken back)"
    else:
        left = (
            f"it could not be taken back either ({type(undo_error).__name__}: {undo_error}): delete the keys "
            f"kiq:wf:{workflow_id}* ({{kiq}}kiq:wf:{workflow_id}* on a Redis Cluster) and its first steps (payloads "
            f'with "wf":"{workflow_id}") from their queues, '
            "or let them expire (workflow_retention) and let those steps run as steps of a gone workflow"
        )
    return WorkflowError(
        f"workflow {workflow_id} could not be started: Redis refused it ({type(error).__name__}: {error}); {left}; "
        "start it again once Redis takes writes (at maxmemory: free memory or raise maxmemory)"
    )


def _prepare(
    steps: list[Step], result: Shape, handler: kiq.Signature | None, config: kiq.Config, keys: kiq.ext.Keyspace
) -> tuple[str, list[Encoded], list[list[tuple[Any, ...]]]]:
    """The workflow's id, its encoded steps and the commands that start it (on a Redis of keyspace ``keys``), in
    round trips."""
    if kiq.testing.mode() is not None:
        raise WorkflowError(
            "kiq.testing's fake and inline modes do not run workflows (their steps are pushed by Redis itself): "
            "start the workflow outside the mode (inside kiq.testing.disable()) and run its steps with a worker"
        )
    config.add_plugin("workflow")  # its setting (workflow_retention), once; its hooks matter in the workers
    link(steps)
    workflow_id = new_workflow_id()
    client = kiq.Client(config)
    encoded = [_encode(client, workflow_id, step) for step in steps]
    on_error = None if handler is None else _encode_handler(client, workflow_id, handler)
    return workflow_id, encoded, list(_commands(keys, workflow_id, result, encoded, on_error, config))


def _stand_in() -> str:
    return "kiq-workflow-input-" + secrets.token_hex(16)


def _encode_item(
    client: kiq.Client, signature: kiq.Signature, extra: dict[str, Any], later: int, where: str
) -> tuple[str, str, str, str | None]:
    """``(queue, jid, payload, stand_in)`` of one call through the client middleware and checks; ``later`` stand-in
    arguments go first (``Client.encode``), given later as one text in place of the stand-in."""
    stand_in = _stand_in() if later else None
    options = dict(signature.options)
    options.pop("config", None)  # the workflow's config pushes every step
    if "shard" in options:
        raise WorkflowError(f"{where} {signature!r:.200}: a workflow runs on one Redis; leave shard out")
    item = {**options, "class": signature.job_class, "args": [stand_in] * later + list(signature.args), **extra}
    if signature.kwargs:
        item["kwargs"] = signature.kwargs
    try:
        encoded = client.encode(item, later=later)
    except (kiq.KiqError, TypeError, ValueError) as error:
        raise WorkflowError(f"{where} {signature!r:.200}: {error}") from error
    if encoded is None:
        raise WorkflowError(f"{where} {signature!r:.200}: a client middleware dropped it; a workflow needs every step")
    queue, jid, at, payload = encoded
    if at is not None:
        raise WorkflowError(f"{where} {signature!r:.200}: a workflow step cannot be scheduled ('at'); leave it out")
    return queue, jid, payload, stand_in


def _encode(client: kiq.Client, workflow_id: str, step: Step) -> Encoded:
    later = 0 if step.given is None else 1
    extra = {"wf": workflow_id, "wf_step": step.id}
    queue, jid, payload, stand_in = _encode_item(client, step.signature, extra, later, f"workflow step {step.id}")
    if not step.after:
        return Encoded(step, queue, jid, payload, None)
    given = None if step.given is None or stand_in is None else input_pieces(step.given)
    return Encoded(step, queue, jid, payload, split_payload(payload, stand_in, given))


def _encode_handler(client: kiq.Client, workflow_id: str, handler: kiq.Signature) -> tuple[str, Pieces]:
    later = 0 if handler.immutable else HANDLER_INPUTS
    extra = {"wf_handler": workflow_id}
    queue, _, payload, stand_in = _encode_item(client, handler, extra, later, "on_error handler")
    if stand_in is not None:  # the three stand-ins become one piece: the script writes all three values there
        payload = payload.replace(",".join([f'"{stand_in}"'] * later), f'"{stand_in}"', 1)
    return queue, split_payload(payload, stand_in, ["E"] if stand_in is not None else None)


def _graph_entry(item: Encoded) -> str:
    step = item.step
    return compact(
        {"class": step.signature.job_class.kiq_name, "queue": item.queue, "jid": item.jid, "after": step.after,
         "next": step.next, "tolerant": step.tolerant}
    )  # fmt: skip


def _commands(
    keys: kiq.ext.Keyspace,
    workflow_id: str,
    result: Shape,
    encoded: list[Encoded],
    handler: tuple[str, Pieces] | None,
    config: kiq.Config,
) -> Iterator[list[tuple[Any, ...]]]:
    """Not a transaction (a cluster's ``queue`` layout keeps each queue in a slot of its own): the graph first, then
    the first steps, so a step that finishes at once finds the graph."""
    retention = config.get("workflow_retention")
    now = time.time()
    for start in range(0, len(encoded), BATCH):
        batch = encoded[start : start + BATCH]
        commands: list[tuple[Any, ...]] = [
            ("HSET", workflow_key(keys, workflow_id, "steps"), *_pairs(batch, _graph_entry))
        ]
        waiting = [item for item in batch if item.pieces is not None]
        if waiting:
            commands.append(("HSET", workflow_key(keys, workflow_id, "payload"), *_pairs(waiting, _pieces_text)))
            commands.append(("HSET", workflow_key(keys, workflow_id, "wait"), *_pairs(waiting, _wait_count)))
        if start + BATCH >= len(encoded):  # the last batch of the graph: the workflow exists from here on
            meta: dict[str, Any] = {"state": "running", "created_at": repr(now), "left": len(encoded),
                                    "result": compact(result)}  # fmt: skip
            if handler is not None:
                meta["on_error_queue"], meta["on_error"] = handler[0], compact(handler[1])
            commands.append(
                ("HSET", workflow_key(keys, workflow_id), *(part for pair in meta.items() for part in pair))
            )
            commands.extend(("EXPIRE", key, retention) for key in all_keys(keys, workflow_id))
            commands.append(("ZADD", index_key(keys), repr(now), workflow_id))
            commands.append(("ZREMRANGEBYSCORE", index_key(keys), "-inf", repr(now - retention)))
        yield commands
    first = [item for item in encoded if item.pieces is None]
    for start in range(0, len(first), BATCH):
        batch = first[start : start + BATCH]
        states = workflow_key(keys, workflow_id, "state")
        # made here, after the graph's EXPIREs: without its own, it would outlive the workflow if no step ever ends
        commands = [("HSET", states, *(p for item in batch for p in (item.step.id, "enqueued"))),
                    ("EXPIRE", states, retention)]  # fmt: skip
        for queue in dict.fromkeys(item.queue for item in batch):
            commands.append(("SADD", keys.key(QUEUES), queue))
            commands.append(("LPUSH", keys.queue(queue), *(item.payload for item in batch if item.queue == queue)))
        yield commands


def _pairs(batch: list[Encoded], value: Any) -> list[str]:
    return [part for item in batch for part in (item.step.id, value(item))]


def _pieces_text(item: Encoded) -> str:
    assert item.pieces is not None
    return compact(item.pieces)


def _wait_count(item: Encoded) -> str:
    return str(len(item.step.after))
