"""``python -m bench.multi N COMMAND...``: start N copies of COMMAND together and wait for them all, for a
system without a swarm of its own (Ruby Sidekiq 6: one process each). The copies share this process's group:
the harness stops them with SIGTERM to the group (bench/runner.py), so this launcher passes nothing on (a second
TERM would reach each copy twice), outlives the copies and exits with the first non-zero status. The harness
sees one worker whose process tree is the N copies, so it times their drain together and sums their CPU time
and RSS. Stdlib only."""

from __future__ import annotations

import signal
import subprocess
import sys


def main(argv: list[str]) -> int:
    count, command = int(argv[0]), argv[1:]
    children = [subprocess.Popen(command, stdin=subprocess.DEVNULL) for _ in range(count)]

    def stay(_signum: int, _frame: object) -> None:
        pass  # the group's signal reached the copies too; wait for them

    signal.signal(signal.SIGTERM, stay)  # after the Popens: a handler (not SIG_IGN) is not inherited over exec
    signal.signal(signal.SIGINT, stay)
    codes = [child.wait() for child in children]
    return next((code for code in codes if code), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
