#!/usr/bin/env bash
# `make run`: runs the dispatcher for local development with no configuration.
# Database: DATABASE_URL if set; else the local server on 127.0.0.1:5432; else
# a private cluster under ./.data/pg started with the initdb/pg_ctl found on
# this machine. Secrets for development are generated once into ./.data/dev.env.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .data

if [ -z "${DATABASE_URL:-}" ]; then
  if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    export DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
  else
    bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
    [ -n "$bindir" ] || bindir=$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")
    if [ ! -x "$bindir/initdb" ]; then
      echo "run-dev: no DATABASE_URL, nothing on 127.0.0.1:5432, and no initdb found; install Postgres or set DATABASE_URL" >&2
      exit 1
    fi
    data="$PWD/.data/pg"
    as_pg=()
    if [ "$(id -u)" = 0 ]; then as_pg=(runuser -u postgres --); chown postgres "$PWD/.data" 2>/dev/null || true; fi
    if [ ! -f "$data/PG_VERSION" ]; then
      echo "run-dev: creating a private Postgres cluster in $data"
      "${as_pg[@]}" "$bindir/initdb" -D "$data" -U postgres --auth=trust >/dev/null
    fi
    if ! pg_isready -q -h 127.0.0.1 -p 54329 2>/dev/null; then
      "${as_pg[@]}" "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -w \
        -o "-p 54329 -c listen_addresses=127.0.0.1 -k $data" start >/dev/null
    fi
    export DATABASE_URL="postgres://postgres@127.0.0.1:54329/postgres?sslmode=disable"
  fi
fi

echo "run-dev: building bin/dispatcher"
go build -o bin/dispatcher ./cmd/dispatcher

if [ ! -f .data/dev.env ]; then
  key=$(./bin/dispatcher gen-master-key)
  {
    echo "DISPATCHER_MASTER_KEYS=$key"
    echo "DISPATCHER_PUBLISHER_TOKENS=dev-publisher-$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')"
    echo "DISPATCHER_ADMIN_TOKENS=dev-admin-$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')"
    echo "DISPATCHER_OPERATOR_TOKENS=dev-operator-$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')"
  } > .data/dev.env
  chmod 600 .data/dev.env
fi
set -a
# shellcheck disable=SC1091
. .data/dev.env
set +a
export DISPATCHER_OUTBOX_DATABASE_URL="${DISPATCHER_OUTBOX_DATABASE_URL:-$DATABASE_URL}"
# Local receivers (loopback) are allowed in development only.
export DISPATCHER_EGRESS_ALLOW_CIDRS="${DISPATCHER_EGRESS_ALLOW_CIDRS:-127.0.0.0/8,::1/128}"
export DISPATCHER_LOG_FORMAT="${DISPATCHER_LOG_FORMAT:-text}"

./bin/dispatcher migrate --outbox-database-url "$DISPATCHER_OUTBOX_DATABASE_URL"
cat <<MSG
----------------------------------------------------------------------
 dispatcher (development)
   database   ${DATABASE_URL%%\?*}
   admin      DISPATCHER_TOKEN=$DISPATCHER_ADMIN_TOKENS
   publisher  $DISPATCHER_PUBLISHER_TOKENS
   operator   $DISPATCHER_OPERATOR_TOKENS   (River UI login)
   (tokens and the master key live in .data/dev.env)
   try: DISPATCHER_TOKEN=\$admin ./bin/dispatcher event-types
----------------------------------------------------------------------
MSG
exec ./bin/dispatcher serve "$@"
