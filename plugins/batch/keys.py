"""Where a batch lives in Redis, and what a batch id looks like.

Per batch ``<bid>`` (all expiring: ``batch_expiry`` after the last change, ``batch_retention`` after success):

    kiq:batch:<bid>          HASH  info (JSON: description, created_at, callbacks), parent, the callback payloads
                                   (cb:<event>, cbq:<event> its queue, cbj:<event> its jid) and the times
                                   complete_at, success_at, death_at (each set once: the once-only markers)
    kiq:batch:<bid>:jids     SET   every job ever added (``total``)
    kiq:batch:<bid>:pending  SET   jobs not succeeded yet
    kiq:batch:<bid>:failed   SET   jobs that failed and have not succeeded since (a subset of pending)
    kiq:batch:<bid>:died     SET   jobs that died and have not succeeded since (a subset of failed)
    kiq:batch:<bid>:open     SET   one token per ``with batch:`` block still adding jobs
    kiq:batch:<bid>:kids     HASH  child bid -> running | complete | success

and ``kiq:batches`` (ZSET: bid -> created_at), the index ``kiq batches`` lists, pruned as batches expire.

These are the names on a standalone server; every key goes through the keyspace of the Redis it is sent to
(``kiq.ext.keyspace``): on a Redis Cluster all of them are in kiq's shared slot (``{kiq}kiq:batch:<bid>``), in both
layouts, so the batch program and the status reads (a MULTI) reach every batch of the tree.
"""

from __future__ import annotations

import re

import kiq
import kiq.ext

PREFIX = "kiq:batch:"
INDEX = "kiq:batches"
BID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # ours are 22 characters; Sidekiq Pro's base64 bids fit too
EVENTS = ("complete", "success", "death")


def new_bid() -> str:
    """A bid is as hard to guess as a tracking task id: ``kiq.ext.new_public_id()``."""
    return kiq.ext.new_public_id()


def batch_key(keys: kiq.ext.Keyspace, bid: str, part: str = "") -> str:
    """``kiq:batch:<bid>`` or one of its sets (``part`` ``jids``, ``pending``, ...), in the keyspace ``keys``."""
    return keys.key(f"{PREFIX}{bid}:{part}" if part else PREFIX + bid)


def index_key(keys: kiq.ext.Keyspace) -> str:
    """The index of batches, ``kiq:batches``, in the keyspace ``keys``."""
    return keys.key(INDEX)


def checked_bid(bid: object) -> str:
    """``bid`` if it can be a batch id, else a ValueError naming it (a bid comes from payloads, URLs, the CLI)."""
    if not isinstance(bid, str) or not BID.fullmatch(bid):
        raise ValueError(f"not a batch id: {bid!r:.80}")
    return bid
