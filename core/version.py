"""kiq's version, from its one source: the installed package's metadata (``version`` in pyproject.toml)."""

from __future__ import annotations

import importlib.metadata

__version__ = importlib.metadata.version("kiq")
