#!/usr/bin/env bash
# `go test -exec` for make test: runs the test binary it is given once no other
# test binary of this run is running (a lock), so that the tests share the
# Postgres server one package at a time while go keeps compiling and linking
# the next packages in parallel (which `go test -p 1` would serialise too).
# Without flock(1) it runs the binary at once (the Makefile uses -p 1 then).
set -euo pipefail
if [ -n "${TEST_LOCK:-}" ] && command -v flock >/dev/null 2>&1; then
  exec flock "$TEST_LOCK" "$@"
fi
exec "$@"
