#!/usr/bin/env bash
# `make ts/pack` (and `make release`): the TypeScript client's npm tarball,
# standmeet-dispatcher-client-<X.Y.Z>.tgz, into OUT_DIR. It holds the compiled client
# (dist/src: JavaScript and its .d.ts) and its README; its one runtime
# dependency is openapi-fetch. With a VERSION (vX.Y.Z, as the git tag is
# spelled) the package says that version; without, package.json's.
#
# usage: scripts/ts-pack.sh OUT_DIR [VERSION]
# Needs clients/typescript/node_modules (make deps/ts): the build is tsc.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:?usage: scripts/ts-pack.sh OUT_DIR [VERSION]}
version=${2:-}
pkg=clients/typescript
[ -d "$pkg/node_modules" ] || { echo "ts-pack: $pkg/node_modules is missing: make deps/ts" >&2; exit 1; }

rm -rf "$pkg/dist/src"
npm --prefix "$pkg" run --silent prepare

# Packed from a copy: the version is set there, and prepare (which needs the
# sources and TypeScript) is not run again on the built copy.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$pkg/package.json" "$pkg/README.md" "$stage/"
mkdir -p "$stage/dist"
cp -R "$pkg/dist/src" "$stage/dist/src"
if [ -n "$version" ]; then
  (cd "$stage" && npm pkg set "version=${version#v}")
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
(cd "$stage" && npm pkg delete scripts.prepare && npm pack --silent --pack-destination "$out")
