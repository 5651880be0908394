"""A profile over ``profile_max_bytes`` is cut to fit, saying what was left out: first the small calls are folded
into their callers (the whole run still shown), then, if that is not enough, only the run's first part is kept."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence

from pyinstrument.session import Session

from kiq.plugins.profiling.encode import fitted, merged
from kiq.plugins.profiling.firefox import Record, firefox_profile

ROOT = "perform\x00/app/jobs.py\x0010"


def session(records: list[Record]) -> Session:
    return Session(records, 1.7e9, sum(t for _, t in records), 0.001, 0.001, len(records), [], "test", 0.0, [], [])


def firefox(records: Sequence[Record]) -> dict[str, object]:
    return firefox_profile(records, 1.7e9, 1, 2, "MainThread", {"class": "Job"})


def many_small_calls(count: int) -> list[Record]:
    """One big call and ``count`` small distinct ones, each its own stack."""
    big: list[Record] = [([ROOT, "crunch\x00/app/math.py\x005"], 0.001)] * (count * 2)
    small: list[Record] = [([ROOT, f"helper_{n}\x00/app/helpers_{n}.py\x00{n}"], 0.000001) for n in range(count)]
    return [record for pair in zip(big[::2], small, strict=True) for record in pair]


def stacks_of(encoded: bytes) -> set[str]:
    (thread,) = json.loads(gzip.decompress(encoded))["threads"]
    return {thread["stringArray"][name] for name in thread["funcTable"]["name"]}


def test_a_profile_that_fits_is_whole() -> None:
    records = many_small_calls(50)
    encoded = fitted(session(records), firefox, 1_000_000)
    assert encoded.cut is None
    assert {"perform", "crunch", "helper_0", "helper_49"} <= stacks_of(encoded.data)
    assert encoded.data[4:8] == encoded.session[4:8] == bytes(4)  # gzip's mtime: none (encode.gzipped)


def test_small_calls_are_folded_into_their_callers_first() -> None:
    records = many_small_calls(3000)
    whole = fitted(session(records), firefox, 10**9)
    limit = whole.size // 3
    encoded = fitted(session(records), firefox, limit)
    assert encoded.size <= limit
    assert encoded.cut is not None and "of the time counted in their callers" in encoded.cut
    assert "first" not in encoded.cut
    names = stacks_of(encoded.data)
    assert {"perform", "crunch"} <= names and "helper_0" not in names
    part = json.loads(gzip.decompress(encoded.session))
    assert sum(t for _, t in part["frame_records"]) == sum(t for _, t in records)  # the whole run's time


def test_past_folding_only_the_first_part_is_kept() -> None:
    """Two calls taking turns, each half the time: folding keeps both, and the samples do not merge."""
    calls = [[ROOT, "read\x00/app/io.py\x001"], [ROOT, "parse\x00/app/io.py\x009"]]
    records: list[Record] = [(calls[n % 2], 0.001 + n * 1e-7) for n in range(20000)]
    encoded = fitted(session(records), firefox, 20_000)
    assert encoded.size <= 20_000
    assert encoded.cut is not None and "only the first" in encoded.cut and "s of 39.999 s kept" in encoded.cut
    kept = json.loads(gzip.decompress(encoded.session))["frame_records"]
    assert 100 < len(kept) < 20000 and [stack for stack, _ in kept[:2]] == calls


def test_consecutive_samples_of_one_stack_are_merged() -> None:
    stack = [ROOT, "crunch\x00/app/math.py\x005"]
    assert merged([(stack, 0.001), (stack, 0.002), ([ROOT], 0.001)]) == [(stack, 0.003), ([ROOT], 0.001)]
