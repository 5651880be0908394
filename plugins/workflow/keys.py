"""Where a workflow lives in Redis, and what a workflow id looks like.

Per workflow ``<id>`` (every key expires ``workflow_retention`` seconds after the workflow's last change):

    kiq:wf:<id>          HASH  state (running | succeeded | failed), created_at, finished_at, left (steps not
                               finished yet), error (JSON {"jid", "class", "message"} of the step that died),
                               result (JSON: the shape of the workflow's result, see ``shape.py``), on_error (the
                               handler's prebuilt payload, JSON list of pieces), on_error_queue
    kiq:wf:<id>:steps    HASH  step id -> JSON {"class", "queue", "jid", "after", "next", "tolerant"}: the graph
    kiq:wf:<id>:payload  HASH  step id -> JSON list of pieces of a waiting step's payload (removed once pushed)
    kiq:wf:<id>:wait     HASH  step id -> how many of its ``after`` steps have not finished yet
    kiq:wf:<id>:state    HASH  step id -> enqueued | succeeded | failed | dead | skipped (absent: waiting)
    kiq:wf:<id>:result   HASH  step id -> the JSON text of the value the step returned
    kiq:wf:<id>:error    HASH  step id -> the step's last error, "Class: message"

and ``kiq:workflows`` (ZSET: id -> created_at), the index ``workflows()`` lists, pruned as workflows expire.

These are the names on a standalone server; every key goes through the keyspace of the Redis it is sent to
(``kiq.ext.keyspace``): on a Redis Cluster all of them are in kiq's shared slot (``{kiq}kiq:wf:<id>``), in both layouts,
so the step program and the status reads (a MULTI) reach a workflow's keys together.
"""

from __future__ import annotations

import re

import kiq
import kiq.ext

PREFIX = "kiq:wf:"
INDEX = "kiq:workflows"
PARTS = ("steps", "payload", "wait", "state", "result", "error")
WORKFLOW_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # ours are 22 characters


def new_workflow_id() -> str:
    """A workflow id grants reading its results, like a bid or a task id: ``kiq.ext.new_public_id()``."""
    return kiq.ext.new_public_id()


def workflow_key(keys: kiq.ext.Keyspace, workflow_id: str, part: str = "") -> str:
    """``kiq:wf:<id>`` or one of its parts (``steps``, ``state``, ...), in the keyspace ``keys``."""
    return keys.key(f"{PREFIX}{workflow_id}:{part}" if part else PREFIX + workflow_id)


def all_keys(keys: kiq.ext.Keyspace, workflow_id: str) -> list[str]:
    return [workflow_key(keys, workflow_id), *(workflow_key(keys, workflow_id, part) for part in PARTS)]


def index_key(keys: kiq.ext.Keyspace) -> str:
    """The index of workflows, ``kiq:workflows``, in the keyspace ``keys``."""
    return keys.key(INDEX)


def checked_workflow_id(workflow_id: object) -> str:
    """``workflow_id`` if it can be a workflow id, else a ValueError naming it (ids come from URLs and the CLI)."""
    if not isinstance(workflow_id, str) or not WORKFLOW_ID.fullmatch(workflow_id):
        raise ValueError(f"not a workflow id: {workflow_id!r:.80}")
    return workflow_id
