"""A 60 s Redis outage while workflow steps end: every step's outcome held and written once Redis is back, each
successor pushed once (see test_adversarial_outage.py, whose run this is with a long outage; alone in its file so
that one stays short)."""

from __future__ import annotations

from pathlib import Path

import pytest

import kiq
from tests.outage_support import AofRedis

from .test_adversarial_outage import config, run_through_outage, server

pytestmark = [pytest.mark.slow, pytest.mark.soak]  # make soak; with a 3 s outage: test_adversarial_outage.py
__all__ = ["config", "server"]  # the fixtures


def test_steps_ending_during_a_60s_outage_push_their_successors_once_when_redis_is_back(
    server: AofRedis, config: kiq.Config, tmp_path: Path
) -> None:
    run_through_outage(server, config, tmp_path, "reliable", 60.0)
