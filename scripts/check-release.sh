#!/usr/bin/env bash
# `make check/release` (CI): the release process end to end, here, on copies:
#
#   1. make release VERSION=v0.0.0-ci on a copy of CHANGELOG.md (with one
#      entry added to [Unreleased], so that there is something to cut) into a
#      temporary dist/: the section is cut, the binaries print the version,
#      the checksums verify;
#   2. a registry of go-containerregistry's (tools/image registry) on a
#      loopback port, started here and stopped on exit;
#   3. make push IMAGE=127.0.0.1:<port>/webhook-dispatcher, as documented;
#   4. tools/image verify pulls it back: the index's digest must be the one
#      make release wrote, both architectures there with the release's
#      annotations, the entrypoint /dispatcher as a non-root user, and this
#      machine's binary must print the version.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

version=v0.0.0-ci
tmp=$(mktemp -d)
registry_pid=
cleanup() {
  if [ -n "$registry_pid" ]; then kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "check-release: $*" >&2; exit 1; }

start=$SECONDS
awk '/^## \[Unreleased\]/ && !done { print; print ""; print "### Added"; print "- check-release: an entry to cut"; done = 1; next } { print }' \
  CHANGELOG.md > "$tmp/CHANGELOG.md"
make --no-print-directory release VERSION=$version DIST="$tmp/dist" CHANGELOG="$tmp/CHANGELOG.md"
out=$tmp/dist/$version

grep -q '^## \[0\.0\.0-ci\] - [0-9]\{4\}-[0-9][0-9]-[0-9][0-9]$' "$tmp/CHANGELOG.md" || fail "no [0.0.0-ci] section was cut"
grep -q '^## \[Unreleased\]$' "$tmp/CHANGELOG.md" || fail "the [Unreleased] section is gone"
grep -q '^- check-release: an entry to cut$' "$out/RELEASE-NOTES.md" || fail "RELEASE-NOTES.md lacks the section's entries"
(cd "$out" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not verify"
got=$("$out/dispatcher-$version-linux-$(go env GOARCH)" --version)
[[ $got == "dispatcher $version "* ]] || fail "the binary prints '$got', want dispatcher $version"
echo "check-release: release built in $((SECONDS - start))s: $(ls "$out" | tr '\n' ' ')"

# The registry: a binary of tools/image, so that its pid is the server's.
go -C tools/image build -o "$tmp/image" .
"$tmp/image" registry -addr 127.0.0.1:0 -addr-file "$tmp/registry.addr" &
registry_pid=$!
for _ in $(seq 1 100); do [ -s "$tmp/registry.addr" ] && break; sleep 0.1; done
[ -s "$tmp/registry.addr" ] || fail "the test registry did not start"
addr=$(cat "$tmp/registry.addr")

make --no-print-directory push IMAGE="$addr/webhook-dispatcher" VERSION=$version DIST="$tmp/dist"
"$tmp/image" verify -image "$addr/webhook-dispatcher:${version#v}" -digest "$(cat "$out/image-index.digest")" -version $version
echo "check-release: ok in $((SECONDS - start))s"
cd "$root"
