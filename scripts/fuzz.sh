#!/usr/bin/env bash
# Runs every Fuzz* target of the module and of pkg/'s briefly: FUZZTIME is a duration
# (10s) or an iteration count (3000x; CI uses a count, which is immune to
# the fuzz engine's end-of-deadline race, golang/go#75804).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}
status=0
while IFS= read -r line; do
  file=${line%%:*}
  name=$(sed -E 's/^.*func (Fuzz[A-Za-z0-9_]+).*/\1/' <<<"$line")
  pkg="./$(dirname "$file")"
  # pkg/ is a module of its own: its packages are tested from there.
  mod=. rel=$pkg
  case $pkg in ./pkg/*) mod=pkg rel=./${pkg#./pkg/} ;; esac
  echo "== $pkg $name ($fuzztime)"
  if ! go -C "$mod" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$rel"; then
    # A real finding leaves a crasher under testdata/fuzz; anything else is
    # the engine, so run once more before calling it a failure.
    if [ -n "$(git status --porcelain -- "$pkg/testdata/fuzz/$name" 2>/dev/null)" ]; then status=1; continue; fi
    echo "== $pkg $name: retrying once"
    go -C "$mod" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$rel" || status=1
  fi
done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(' internal pkg)
exit $status
