#!/usr/bin/env bash
# Makes sure a Postgres server answers on 127.0.0.1:5432 for the tests:
# starts the installed cluster if it is down, installs Postgres with apt if it
# is absent, and fails (never skips) when it still does not answer. Then it
# checks the server has the connections `make test` needs free
# (TEST_PG_CONNS, default 45), whichever server DATABASE_URL names.
set -euo pipefail

need=${TEST_PG_CONNS:-45}

ready() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }

# free_connections checks that the server at $1 can take $need more clients.
free_connections() {
  if ! command -v psql >/dev/null 2>&1; then
    echo "ensure-postgres: no psql here, so free connections were not checked (make test needs $need)"
    return 0
  fi
  local row max used
  # Our own session is counted in used and goes away, hence the +1.
  row=$(psql "$1" -Atc "SELECT current_setting('max_connections'), count(*) - 1
                          FROM pg_stat_activity WHERE backend_type = 'client backend'") || {
    echo "ensure-postgres: FAILED: cannot query the server to count its connections" >&2
    return 1
  }
  max=${row%%|*} used=${row##*|}
  if [ $((max - used)) -lt "$need" ]; then
    echo "ensure-postgres: FAILED: the server has $((max - used)) connections free (max_connections $max, $used in use); make test needs $need." >&2
    echo "ensure-postgres: wait for the other clients to finish, or raise max_connections (TEST_PG_CONNS overrides the need)." >&2
    return 1
  fi
  echo "ensure-postgres: $((max - used)) of $max connections free (make test needs $need)"
}

if [ -n "${DATABASE_URL:-}${TEST_DATABASE_URL:-}" ]; then
  echo "ensure-postgres: using DATABASE_URL/TEST_DATABASE_URL from the environment"
  free_connections "${TEST_DATABASE_URL:-$DATABASE_URL}"
  exit
fi

if ! command -v pg_isready >/dev/null 2>&1 || ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
  echo "ensure-postgres: Postgres is not installed; installing it with apt"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
  version=$(ls /etc/postgresql | sort -V | tail -n1)
  # Trust local connections, as on the development machines.
  sed -i 's/^\(host\s\+all\s\+all\s\+127.0.0.1\/32\s\+\)\S\+/\1trust/; s/^\(local\s\+all\s\+all\s\+\)\S\+/\1trust/; s/^\(local\s\+all\s\+postgres\s\+\)\S\+/\1trust/' \
    "/etc/postgresql/$version/main/pg_hba.conf"
fi

if ! ready; then
  version=$(ls /etc/postgresql | sort -V | tail -n1)
  echo "ensure-postgres: starting Postgres $version"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 1 30); do ready && break; sleep 1; done
fi

if ! ready; then
  echo "ensure-postgres: FAILED: no Postgres answers on 127.0.0.1:5432" >&2
  exit 1
fi
psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select version()' >/dev/null
echo "ensure-postgres: Postgres is up on 127.0.0.1:5432"
free_connections "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
