"""The plugin's one error."""

from __future__ import annotations

import kiq


class ActiveJobError(kiq.KiqError, ValueError):
    """An ActiveJob envelope or argument kiq cannot read, or a value it cannot send to Rails; the message names
    the value, where it is, and what to do."""
