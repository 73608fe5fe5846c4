#!/usr/bin/env bash
# `make stop`: stops what `make run` (scripts/run-dev.sh) started: the
# `dispatcher listen` receivers run with its .data/dev.env, its dispatcher,
# if it still runs, and its private Postgres cluster, if it made one. A server it found running (127.0.0.1:5432, DATABASE_URL) is left alone.
# With --clean (`make clean`) it then drops the database it created for this
# clone on a local server (the name .data/database records), and removes
# .data/, bin/ and a cluster kept outside the clone.
set -euo pipefail
cd "$(dirname "$0")/.."

# The `dispatcher listen` receivers run with .data/dev.env: each records
# itself as .data/listen/<pid>.pid (DISPATCHER_LISTEN_PID_DIR) and removes
# the file when it stops. Only a pid that is still a dispatcher listen is
# signalled: pids are reused.
if [ -d .data/listen ]; then
  for f in .data/listen/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cut -d' ' -f1 "$f")
    addr=$(cut -s -d' ' -f2 "$f")
    case "$pid" in ''|*[!0-9]*) rm -f "$f"; continue ;; esac
    if kill -0 "$pid" 2>/dev/null && ps -p "$pid" -o args= | grep -q 'dispatcher.* listen'; then
      kill -TERM "$pid"
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      if kill -0 "$pid" 2>/dev/null; then
        echo "stop-dev: dispatcher listen (pid $pid) still running 10 s after SIGTERM" >&2
        exit 1
      fi
      echo "stop-dev: stopped dispatcher listen (pid $pid${addr:+, on $addr})"
    fi
    rm -f "$f"
  done
fi

if [ -f .data/dispatcher.pid ]; then
  pid=$(cat .data/dispatcher.pid)
  # Only that pid if it is still our dispatcher: pids are reused.
  if kill -0 "$pid" 2>/dev/null && ps -p "$pid" -o args= | grep -q 'dispatcher serve'; then
    kill -TERM "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "stop-dev: dispatcher (pid $pid) still running 25 s after SIGTERM" >&2
      exit 1
    fi
    echo "stop-dev: stopped the dispatcher (pid $pid)"
  fi
  rm -f .data/dispatcher.pid
fi

if [ -f .data/pg.dir ] && [ -f .data/pg.bindir ]; then
  data=$(cat .data/pg.dir)
  bindir=$(cat .data/pg.bindir)
  as_pg() { if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }
  if [ -x "$bindir/pg_ctl" ] && as_pg "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    as_pg "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null
    echo "stop-dev: stopped the private Postgres cluster in $data"
  fi
fi

if [ "${1:-}" = --clean ]; then
  # The database make run created (never one DATABASE_URL named): its
  # secrets are sealed with the master key about to be removed.
  if [ -f .data/database ] && [ ! -f .data/pg.dir ]; then
    server=$(sed -n 1p .data/database)
    psql_bin=$(sed -n 2p .data/database)
    # Made before databases were named per clone: dispatcher_dev.
    dbname=$(sed -n 3p .data/database)
    dbname=${dbname:-dispatcher_dev}
    case "$dbname" in
      dispatcher_dev|dispatcher_dev_*) ;;
      *) echo "stop-dev: .data/database names $dbname, not a database make run creates; not dropping it" >&2; dbname= ;;
    esac
    if [ -z "$dbname" ]; then
      :
    elif "$psql_bin" "$server" -qc "DROP DATABASE IF EXISTS \"$dbname\" WITH (FORCE)" >/dev/null; then
      echo "stop-dev: dropped the $dbname database on $(echo "${server#postgres://postgres@}" | cut -d/ -f1)"
    else
      echo "stop-dev: could not drop the $dbname database on $(echo "${server#postgres://postgres@}" | cut -d/ -f1); drop it yourself" >&2
    fi
  fi
  if [ -f .data/pg.dir ]; then
    data=$(cat .data/pg.dir)
    case "$data" in
      /var/tmp/dispatcher-dev-*/pg) rm -rf "$(dirname "$data")"; echo "stop-dev: removed $(dirname "$data")" ;;
    esac
  fi
  rm -rf .data bin
  echo "stop-dev: removed .data/ and bin/"
fi
