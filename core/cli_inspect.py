"""Inspection commands of the ``kiq`` CLI (stats, queues, sets, processes)."""

from __future__ import annotations

import argparse
from typing import Any


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    """Register the inspection subcommands on the ``kiq`` parser."""
