"""``kiq tracking ...``: registering the commands costs no SQLAlchemy import (every ``kiq worker`` start
registers them, tracking on or off), and the commands work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kiq.plugins.tracking.store import Store
from tests.support import ROOT

NO_SQLALCHEMY = "import sys; sys.modules['sqlalchemy'] = None  # any import of it fails\n"


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_the_kiq_parser_registers_tracking_commands_without_importing_sqlalchemy() -> None:
    check = "import sys, kiq.cli\nkiq.cli.build_parser().parse_args(['tracking', 'show', 'x'])\n"
    check += "assert sys.modules.get('sqlalchemy') is None, 'sqlalchemy was imported'\n"
    loaded = python(check)
    assert loaded.returncode == 0, loaded.stderr
    blocked = python(NO_SQLALCHEMY + "import kiq.plugins.tracking.cli, kiq.plugins.tracking\n" + check)
    assert blocked.returncode == 0, blocked.stderr


def test_init_db_and_show(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tracking.db'}"
    kiq = [sys.executable, "-m", "kiq.cli", "tracking"]
    init = subprocess.run([*kiq, "init-db", "--database-url", url], cwd=ROOT, capture_output=True, text=True)
    assert init.returncode == 0 and "tracking tables ready" in init.stdout, init.stderr
    again = subprocess.run([*kiq, "init-db", "--database-url", url], cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr  # idempotent
    show = subprocess.run([*kiq, "show", "0" * 32, "--database-url", url], cwd=ROOT, capture_output=True, text=True)
    assert show.returncode == 1 and "no task" in show.stdout
    store = Store(url)
    store.create_task(
        {"id": "a" * 32, "name": "n", "job_class": "J", "total": 1, "created_at": 1.0},
        [{"job_id": "j1", "params": [1]}],
    )
    store.engine.dispose()
    show = subprocess.run(
        [*kiq, "show", "a" * 32, "--events", "--database-url", url], cwd=ROOT, capture_output=True, text=True
    )
    assert show.returncode == 0, show.stderr
    task = json.loads(show.stdout)
    assert (task["total"], task["counts"]["enqueued"], [e["job_id"] for e in task["events"]]) == (1, 1, ["j1"])
