"""A recording made into what is stored: the Firefox Profiler's JSON and pyinstrument's session, each gzipped, cut
to fit ``profile_max_bytes`` when the whole would not.

Consecutive samples of the same stack are merged first (nothing is lost: a sample's time is a weight). A profile
still too large is cut in two steps, each saying so in the profile's ``cut`` field: first the frames that took
less than a share of the time (0.1 %, then 1 %, then 5 %) are folded into their callers, which keeps the whole
run's picture; if that is not enough, only the first part of the run is kept.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyinstrument.session import Session

from .firefox import Record

FOLD_SHARES = (0.001, 0.01, 0.05)  # of the run's time: frames under it are folded into their callers, in turn


@dataclass(frozen=True)
class Encoded:
    data: bytes  # gzip of the Firefox Profiler's JSON (Sidekiq's ``data`` field)
    session: bytes  # gzip of pyinstrument's session JSON (kiq's ``pyinstrument`` field)
    cut: str | None  # what was left out, None when nothing was

    @property
    def size(self) -> int:
        return len(self.data) + len(self.session)


def gzipped(value: object) -> bytes:
    # no time in the header (mtime 0, as Ruby's Zlib.gzip writes): the same profile gives the same bytes, and a Ruby
    # reader that gunzips the string its redis gem returns (tagged UTF-8) is not thrown off by time bytes that read
    # as a UTF-8 character (Zlib.gunzip then misplaces the deflate data: "invalid block type")
    return gzip.compress(json.dumps(value, separators=(",", ":")).encode(), compresslevel=6, mtime=0)


def merged(records: Sequence[Record]) -> list[Record]:
    """``records`` with each run of consecutive samples of one stack made one sample of their summed time."""
    out: list[Record] = []
    for stack, seconds in records:
        if out and out[-1][0] == stack:
            out[-1] = (stack, out[-1][1] + seconds)
        else:
            out.append((list(stack), seconds))
    return out


def folded(records: Sequence[Record], share: float) -> list[Record]:
    """Each stack cut at its first frame whose calls took less than ``share`` of the whole time (a frame is named
    by the path to it), so that small calls count in their caller; merged again."""
    paths: dict[tuple[int, str], int] = {}  # (the path to the caller, a frame) -> the path to that frame
    spent: list[float] = []  # by path
    walked: list[list[int]] = []  # each record's paths, root first: linear in the stacks' depth, deep ones too
    for stack, seconds in records:
        path, chain = -1, []
        for frame in stack:
            path = paths.setdefault((path, frame), len(paths))
            if path == len(spent):
                spent.append(0.0)
            spent[path] += seconds
            chain.append(path)
        walked.append(chain)
    least = share * sum(seconds for _, seconds in records)
    cut: list[Record] = []
    for (stack, seconds), chain in zip(records, walked, strict=True):
        depth = 1
        while depth < len(stack) and spent[chain[depth]] >= least:
            depth += 1
        cut.append((stack[:depth], seconds))
    return merged(cut)


def encode(
    session: Session, records: Sequence[Record], firefox: Callable[[Sequence[Record]], dict[str, object]]
) -> tuple[bytes, bytes]:
    """The two stored fields for ``records`` (``session``'s, or fewer): Firefox's JSON made by ``firefox``, and
    pyinstrument's session holding ``records``."""
    part = Session.from_json({**session.to_json(include_frame_records=False), "frame_records": list(records)})
    part.sample_count = len(records)
    return gzipped(firefox(records)), gzipped(part.to_json())


def fitted(session: Session, firefox: Callable[[Sequence[Record]], dict[str, object]], limit: int) -> Encoded:
    """``session`` encoded whole if it fits in ``limit`` bytes, else cut as the module's doc says."""
    records = merged(session.frame_records)
    data, whole = encode(session, records, firefox)
    if len(data) + len(whole) <= limit:
        return Encoded(data, whole, None)
    size = len(data) + len(whole)
    for share in FOLD_SHARES:
        records = folded(records, share)
        data, whole = encode(session, records, firefox)
        if len(data) + len(whole) <= limit:
            return Encoded(data, whole, f"{size} bytes over the {limit}-byte limit: calls under "
                                        f"{share:.1%} of the time counted in their callers")  # fmt: skip
    kept, low, high = encode(session, [], firefox), 0, len(records)  # the longest first part that fits
    while low < high:
        middle = (low + high + 1) // 2
        attempt = encode(session, records[:middle], firefox)
        if len(attempt[0]) + len(attempt[1]) <= limit:
            kept, low = attempt, middle
        else:
            high = middle - 1
    total = sum(seconds for _, seconds in records)
    shown = sum(seconds for _, seconds in records[:low])
    return Encoded(kept[0], kept[1], f"{size} bytes over the {limit}-byte limit: calls under "
                                     f"{FOLD_SHARES[-1]:.1%} of the time counted in their callers, and only the "
                                     f"first {shown:.3f} s of {total:.3f} s kept")  # fmt: skip
