#!/usr/bin/env bash
# Makes sure a Postgres server answers on 127.0.0.1:5432 for the tests:
# starts the installed cluster if it is down, installs Postgres with apt if it
# is absent, and fails (never skips) when it still does not answer.
set -euo pipefail

ready() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }

if [ -n "${DATABASE_URL:-}${TEST_DATABASE_URL:-}" ]; then
  echo "ensure-postgres: using DATABASE_URL/TEST_DATABASE_URL from the environment"
  exit 0
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
