"""The workflow plugin's errors."""

from __future__ import annotations

import kiq


class WorkflowError(kiq.KiqError, ValueError):
    """A canvas that cannot run as a workflow (an empty group, a step whose arguments are not strict JSON, ...), or
    a step that returned a value that is not strict JSON: the message names the step and the fix. A canvas refused
    at its start pushed nothing."""
