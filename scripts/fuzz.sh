#!/usr/bin/env bash
# Runs every Fuzz* target in the module for a short time each.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}
status=0
while IFS= read -r line; do
  file=${line%%:*}
  name=$(sed -E 's/^.*func (Fuzz[A-Za-z0-9_]+).*/\1/' <<<"$line")
  pkg="./$(dirname "$file")"
  echo "== $pkg $name ($fuzztime)"
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"; then status=1; fi
done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(' internal pkg)
exit $status
