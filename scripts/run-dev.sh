#!/usr/bin/env bash
# `make run`: runs the dispatcher for local development with no configuration.
#
# Database: DATABASE_URL if set, used as it is. Else a database of this
# clone's own, dispatcher_dev_<directory>_<hash of its path> (created if
# missing), on the local server at 127.0.0.1:5432; else the same database in
# a private cluster on 127.0.0.1:54329 (or the next free port up to 54338),
# created once with the newest initdb/pg_ctl installed, under ./.data/pg (or
# under /var/tmp when the postgres user cannot enter this clone). Secrets for
# development are generated once into ./.data/dev.env.
#
# Ports: gRPC on 127.0.0.1:7070 and the ops port on 127.0.0.1:9090, unless
# DISPATCHER_GRPC_ADDR / DISPATCHER_OPS_ADDR say otherwise; the addresses
# are kept in .data/dev.env (with DISPATCHER_ADDR, which the CLI reads), so a
# clone keeps its ports from one run to the next. A port already taken stops
# this with the variable that moves it.
#
# `make stop` stops what this started (scripts/stop-dev.sh), and the
# `dispatcher listen` receivers run with .data/dev.env; `make clean` removes
# it all, this clone's database included.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .data

die() { echo "run-dev: $*" >&2; exit 1; }

# This clone's database: two clones on one machine have different master
# keys, so they must not share one. A clone that made dispatcher_dev before
# databases were named per clone keeps it (.data/database records the name).
clone_dbname() {
  local base
  base=$(basename "$PWD" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n' '_' | cut -c1-24)
  echo "dispatcher_dev_${base}_$(printf %s "$PWD" | cksum | cut -d' ' -f1)"
}
if [ -f .data/database ]; then
  dbname=$(sed -n 3p .data/database)
  dbname=${dbname:-dispatcher_dev}
else
  dbname=$(clone_dbname)
fi

# tcp_open reports whether something accepts connections on host $1 port $2
# (bash's /dev/tcp: no Postgres client needed to find out).
tcp_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# pg_bindir prints the newest directory holding Postgres's server programs;
# a version directory without initdb (a client-only package) does not count.
pg_bindir() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin /usr/pgsql-*/bin /opt/homebrew/opt/postgresql*/bin /usr/local/opt/postgresql*/bin 2>/dev/null | sort -rV); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
  done
  if d=$(pg_config --bindir 2>/dev/null) && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
  if d=$(command -v initdb 2>/dev/null) && [ -x "$(dirname "$d")/pg_ctl" ]; then dirname "$d"; return 0; fi
  return 1
}

# as_pg runs a Postgres program as the cluster's owner: the postgres user when
# this runs as root (initdb refuses root), from / so that a clone the postgres
# user cannot enter draws no warnings.
as_pg() {
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# start_private_cluster starts (creating it the first time) the cluster this
# script owns, and records where it is for stop-dev.sh.
start_private_cluster() {
  [ -n "$bindir" ] || die "no DATABASE_URL, nothing answers on 127.0.0.1:5432, and no Postgres server programs (initdb, pg_ctl) are installed: install Postgres (apt-get install postgresql, brew install postgresql) or set DATABASE_URL"
  local data out
  if [ -f .data/pg.dir ]; then
    data=$(cat .data/pg.dir)
  else
    data="$PWD/.data/pg"
  fi
  if [ "$(id -u)" = 0 ]; then
    # initdb refuses to run as root: the cluster belongs to the postgres user,
    # which must be able to reach its data directory.
    id postgres >/dev/null 2>&1 || die "running as root with no postgres user to own a private cluster: run make run as another user, or set DATABASE_URL"
    if [ ! -f .data/pg.dir ]; then
      mkdir -p "$data" && chown postgres: "$data" && chmod 700 "$data"
      if ! runuser -u postgres -- test -w "$data"; then
        rmdir "$data" 2>/dev/null || true
        data="/var/tmp/dispatcher-dev-$(printf %s "$PWD" | cksum | cut -d' ' -f1)/pg"
        echo "run-dev: the postgres user cannot enter $PWD, so the private cluster lives in $data"
        mkdir -p "$data" && chown postgres: "$(dirname "$data")" "$data" && chmod 700 "$data"
      fi
    fi
  fi
  echo "$data" > .data/pg.dir
  echo "$bindir" > .data/pg.bindir
  # The cluster's port, chosen once per clone: the first free from 54329.
  if [ -f .data/pg.port ]; then
    pg_port=$(cat .data/pg.port)
  elif [ -f "$data/PG_VERSION" ]; then
    pg_port=54329 # a cluster made before the port was chosen per clone
    echo "$pg_port" > .data/pg.port
  else
    pg_port=
    for p in $(seq 54329 54338); do
      if ! tcp_open 127.0.0.1 "$p"; then pg_port=$p; break; fi
    done
    [ -n "$pg_port" ] || die "ports 54329-54338 are all taken, so there is no port for a private Postgres cluster; set DATABASE_URL"
    echo "$pg_port" > .data/pg.port
  fi
  if [ ! -f "$data/PG_VERSION" ]; then
    echo "run-dev: creating a private Postgres cluster in $data ($bindir)"
    out=$(as_pg "$bindir/initdb" -D "$data" -U postgres --auth=trust 2>&1) || { echo "$out" >&2; die "initdb failed"; }
  fi
  if ! as_pg "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    if tcp_open 127.0.0.1 "$pg_port"; then
      die "port $pg_port (recorded in .data/pg.port) is taken by something other than the cluster in $data; free it, or run make clean to start over on another port, or set DATABASE_URL"
    fi
    # TCP only: a Unix socket path under a deep clone can exceed the OS limit.
    as_pg "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -w \
      -o "-p $pg_port -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" start >/dev/null ||
      die "the private cluster did not start; see $data/server.log"
  fi
  echo "run-dev: private Postgres cluster on 127.0.0.1:$pg_port, data dir $data, log $data/server.log (make stop stops it)"
}

# The listen addresses: the environment's, else the ones this clone used
# last time, else the defaults; checked before anything is built.
env_of() { if [ -f .data/dev.env ]; then sed -n "s/^$1=//p" .data/dev.env | tail -n1; fi; }
grpc_addr=${DISPATCHER_GRPC_ADDR:-$(env_of DISPATCHER_GRPC_ADDR)}
grpc_addr=${grpc_addr:-127.0.0.1:7070}
ops_addr=${DISPATCHER_OPS_ADDR:-$(env_of DISPATCHER_OPS_ADDR)}
ops_addr=${ops_addr:-127.0.0.1:9090}
check_port() { # variable address
  local host=${2%:*} port=${2##*:}
  host=${host#[}; host=${host%]}
  case "$host" in ""|0.0.0.0|"::") host=127.0.0.1 ;; esac
  if tcp_open "$host" "$port"; then
    die "$2 ($1) is taken, by another make run (in another clone?) or something else: free it, or give this clone other ports, e.g.
  DISPATCHER_GRPC_ADDR=127.0.0.1:7170 DISPATCHER_OPS_ADDR=127.0.0.1:9190 make run
(this clone keeps them in .data/dev.env; the CLI follows through DISPATCHER_ADDR there)"
  fi
}
check_port DISPATCHER_GRPC_ADDR "$grpc_addr"
check_port DISPATCHER_OPS_ADDR "$ops_addr"

if [ -z "${DATABASE_URL:-}" ]; then
  bindir=$(pg_bindir || true)
  psql_bin=$(command -v psql 2>/dev/null || true)
  if [ -z "$psql_bin" ] && [ -n "$bindir" ] && [ -x "$bindir/psql" ]; then psql_bin="$bindir/psql"; fi
  if tcp_open 127.0.0.1 5432; then
    server="postgres://postgres@127.0.0.1:5432"
  else
    start_private_cluster
    server="postgres://postgres@127.0.0.1:$pg_port"
  fi
  [ -n "$psql_bin" ] || die "no psql to create the $dbname database on ${server#postgres://postgres@}: install the Postgres client, or set DATABASE_URL"
  exists=$("$psql_bin" "$server/postgres?sslmode=disable" -Atc "SELECT 1 FROM pg_database WHERE datname = '$dbname'") ||
    die "cannot connect to ${server#postgres://postgres@} as postgres without a password (see above); set DATABASE_URL to a database the dispatcher may own"
  if [ -z "$exists" ]; then
    "$psql_bin" "$server/postgres?sslmode=disable" -qc "CREATE DATABASE $dbname" >/dev/null
    echo "run-dev: created the $dbname database on ${server#postgres://postgres@}"
  fi
  # make clean drops it with .data/: its endpoints' secrets are sealed with
  # the master key in .data/dev.env, useless once that is gone.
  printf '%s\n%s\n%s\n' "$server/postgres?sslmode=disable" "$psql_bin" "$dbname" > .data/database
  export DATABASE_URL="$server/$dbname?sslmode=disable"
fi

if [ -x bin/dispatcher ]; then
  echo "run-dev: building bin/dispatcher"
else
  echo "run-dev: building bin/dispatcher (the first build downloads and compiles the dependencies: a minute or two)"
fi
go build -ldflags "-X main.version=$(git describe --tags --always --dirty 2>/dev/null || echo devel)" -o bin/dispatcher ./cmd/dispatcher

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
# River UI takes its own operator token (roles are disjoint); a dev.env made
# before that gets one.
if ! grep -q '^DISPATCHER_OPERATOR_TOKENS=' .data/dev.env; then
  echo "DISPATCHER_OPERATOR_TOKENS=dev-operator-$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')" >> .data/dev.env
fi
# This run's addresses, for the next run and for the CLI (DISPATCHER_ADDR),
# and where a `dispatcher listen` run with this file records itself
# (DISPATCHER_LISTEN_PID_DIR), so that make stop and make clean stop it too.
grep -v -e '^DISPATCHER_GRPC_ADDR=' -e '^DISPATCHER_OPS_ADDR=' -e '^DISPATCHER_ADDR=' -e '^DISPATCHER_LISTEN_PID_DIR=' \
  .data/dev.env > .data/dev.env.new || true
{
  echo "DISPATCHER_GRPC_ADDR=$grpc_addr"
  echo "DISPATCHER_OPS_ADDR=$ops_addr"
  echo "DISPATCHER_ADDR=$grpc_addr"
  echo "DISPATCHER_LISTEN_PID_DIR=$PWD/.data/listen"
} >> .data/dev.env.new
chmod 600 .data/dev.env.new
mv .data/dev.env.new .data/dev.env
set -a
# shellcheck disable=SC1091
. .data/dev.env
set +a
export DISPATCHER_OUTBOX_DATABASE_URL="${DISPATCHER_OUTBOX_DATABASE_URL:-$DATABASE_URL}"
# Local receivers (loopback) are allowed in development only.
export DISPATCHER_EGRESS_ALLOW_CIDRS="${DISPATCHER_EGRESS_ALLOW_CIDRS:-127.0.0.0/8,::1/128}"
export DISPATCHER_LOG_FORMAT="${DISPATCHER_LOG_FORMAT:-text}"

./bin/dispatcher migrate --outbox-database-url "$DISPATCHER_OUTBOX_DATABASE_URL"
# The URL without its query and without a password, should it hold one.
shown_db=$(printf %s "${DATABASE_URL%%\?*}" | sed -E 's#//([^:@/]*):[^@/]*@#//\1@#')
cat <<MSG
----------------------------------------------------------------------
 dispatcher (development)
   database   $shown_db
   API        $grpc_addr   gRPC, and HTTP/JSON on the same port
   API docs   http://$grpc_addr/docs   (the reference; the document is /openapi.json)
   portal     http://$grpc_addr/portal/   (for endpoint owners: ./bin/dispatcher portal-link --owner O)
   ops        http://$ops_addr   (/metrics, /healthz, /riverui/)
   admin      DISPATCHER_TOKEN=$DISPATCHER_ADMIN_TOKENS
   publisher  $DISPATCHER_PUBLISHER_TOKENS
   operator   $DISPATCHER_OPERATOR_TOKENS   (River UI login)
   (tokens and the master key live in .data/dev.env)
   try, in another shell in this directory:
     set -a; . .data/dev.env; set +a
     DISPATCHER_TOKEN=\$DISPATCHER_ADMIN_TOKENS ./bin/dispatcher event-types
   stop with Ctrl-C; make stop also stops the private cluster, if any
----------------------------------------------------------------------
MSG
# make stop finds this process by its pid (exec keeps it).
echo $$ > .data/dispatcher.pid
exec ./bin/dispatcher serve "$@"
