"""The pauses of a retry loop: ``first`` seconds, doubled after each pause up to ``cap``, back to ``first`` once the
thing retried works again. Every loop of kiq and its plugins that waits on something failing (Redis, a database)
uses it, each with the values named once beside the loop."""

from __future__ import annotations


class Backoff:
    """One retry loop's pauses: ``next()`` is the pause to make now (``first``, then twice the last, at most
    ``cap``); ``reset()`` after a success. Not thread-safe: one per loop."""

    __slots__ = ("cap", "first", "pause")

    def __init__(self, first: float, cap: float) -> None:
        if not 0 < first <= cap:
            raise ValueError(f"a backoff needs 0 < first <= cap, got first={first!r}, cap={cap!r}")
        self.first = first
        self.cap = cap
        self.pause = first  # the next pause

    def next(self) -> float:
        """The pause to make now; the one after it doubles (up to ``cap``)."""
        pause = self.pause
        self.pause = min(pause * 2, self.cap)
        return pause

    def reset(self) -> None:
        """What was retried worked: the next failure's pause is ``first`` again."""
        self.pause = self.first

    def __repr__(self) -> str:
        return f"Backoff(first={self.first!r}, cap={self.cap!r}, next={self.pause!r})"
