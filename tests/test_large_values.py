"""Big values take the paths that copy them least (a worker's memory for a big job): decoding a large payload, packing
a command with a large argument, and a fetch connection after a large reply; each gives what the usual path gives."""

from __future__ import annotations

import json

import hiredis
import pytest
import redis

import kiq
from kiq.connection import DedicatedConnection
from kiq.payload import LARGE_TEXT, loads, running_summary
from kiq.redis import LARGE_VALUE, _pack_in_pieces


def test_a_large_payload_decodes_as_a_small_one_does() -> None:
    filler = "x" * LARGE_TEXT
    text = json.dumps({"a": filler, "big": 12345678901234567890123, "nan": float("nan"), "lone": "\udc80", "é": "ü"})
    value = loads(text)
    assert len(text) > LARGE_TEXT and value["a"] == filler
    assert value["big"] == 12345678901234567890123 and value["nan"] != value["nan"]
    assert value["lone"] == "\udc80" and value["é"] == "ü"


@pytest.mark.parametrize(
    "args",
    [
        ("LREM", "working", -1, "x" * (LARGE_VALUE + 1)),
        ("EVALSHA", "abc", 2, "k1", "k2", 1.5, "é" * (LARGE_VALUE + 1), b"\x00\xff", "small"),
        ("SCRIPT LOAD", "y" * (LARGE_VALUE + 1)),
        ("SET", "k", "\udcff" + "z" * LARGE_VALUE),
    ],
    ids=["lrem", "mixed", "two-word command", "surrogateescape"],
)
def test_a_command_with_a_large_argument_is_packed_in_pieces_as_hiredis_packs_it(args: tuple[object, ...]) -> None:
    pieces = _pack_in_pieces(args)
    words = [*str(args[0]).split(), *args[1:]]
    encoded = [w.encode("utf-8", "surrogateescape") if isinstance(w, str) else w for w in words]
    assert b"".join(pieces) == hiredis.pack_command(tuple(encoded))
    assert any(len(piece) > LARGE_VALUE for piece in pieces) and len(pieces) >= 2


def test_large_values_go_through_redis_and_back(config: kiq.Config) -> None:
    client = config.redis
    value = "é" * (LARGE_VALUE + 3)
    client.rpush("big", value, "small")
    connection = DedicatedConnection(client)
    try:
        assert connection.command("LPOP", "big") == value  # a large reply: the connection reconnects after it
        assert connection.command("LPOP", "big") == "small"
        assert connection.command("LREM", "missing", 0, value) == 0
    finally:
        connection.release()


def test_a_running_job_too_large_to_copy_is_summed_up_in_the_process_registry() -> None:
    job = {"class": "Big", "jid": "a" * 24, "queue": "q", "args": ["x" * 10], "tags": ["t"], "created_at": 1.0}
    summary = json.loads(running_summary(job, "y" * 5_000_000))
    assert summary == {
        "class": "Big",
        "jid": "a" * 24,
        "queue": "q",
        "created_at": 1.0,
        "args": ["(5,000,000 characters of JSON: too large to show while it runs)"],
    }


def test_an_argument_redis_cannot_take_is_refused_as_redis_py_refuses_it() -> None:
    with pytest.raises(redis.DataError, match="object"):
        _pack_in_pieces(("SET", "k", object(), "x" * (LARGE_VALUE + 1)))
