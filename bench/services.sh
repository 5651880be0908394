#!/usr/bin/env bash
# What `make bench` needs besides its two venvs: redis-server (every part starts its own), Ruby with Sidekiq (the
# baseline) and PostgreSQL on 127.0.0.1:5433 with role and database kiq (the tracking system's default URL).
# As root on Debian/Ubuntu, .ci/services.sh installs what is missing (apt: it installs the test suite's Chromium
# too) and starts PostgreSQL (and the test suite's redis on 6390, which the benchmark does not use); it is
# idempotent and quick when everything is there. Otherwise this only checks and says what is missing: without
# redis-server nothing runs; without Sidekiq or PostgreSQL the systems that need them show an error in the tables.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  bash .ci/services.sh >/dev/null # stdout: its export lines, not needed here; stderr: what it found and started
  exit $?
fi

status=0
if ! command -v redis-server >/dev/null; then
  echo "bench: redis-server is missing (Debian: apt-get install redis-server); nothing can run" >&2
  status=1
fi
ruby -e 'require "sidekiq"' >/dev/null 2>&1 ||
  echo "bench: Ruby Sidekiq is missing (Debian: apt-get install ruby-sidekiq): no baseline" >&2
if [ -z "${BENCH_TRACKING_DATABASE_URL:-}" ] && ! (exec 3<>/dev/tcp/127.0.0.1/5433) 2>/dev/null; then
  echo "bench: no PostgreSQL on 127.0.0.1:5433 (as root: bash .ci/services.sh; or set" \
    "BENCH_TRACKING_DATABASE_URL): the tracking system will fail" >&2
fi
exit $status
