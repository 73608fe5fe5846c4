#!/usr/bin/env bash
# `make check/release` (CI): the release process end to end, here, on copies:
#
#   1. make release VERSION=v0.0.0-ci on a copy of CHANGELOG.md (with one
#      breaking entry added to [Unreleased], so that there is something to
#      cut) into a temporary dist/: the section is cut and keeps its
#      "### Breaking changes" heading, the binaries print the version, the
#      chart, the npm tarball and the Python source archive each say it
#      (0.0.0-ci; 0.0.0+ci in PEP 440), the checksums cover and verify them;
#      a BREAKING entry outside that heading is refused;
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
# The npm tarball is one of the artifacts: its tools (a no-op once installed).
make --no-print-directory deps/ts

# A BREAKING entry outside a "### Breaking changes" heading is refused before
# anything is built.
printf '# Changelog\n\n## [Unreleased]\n\n### Changed\n- BREAKING: check-release: hidden\n' > "$tmp/CHANGELOG-hidden.md"
if make --no-print-directory release VERSION=$version DIST="$tmp/dist-hidden" CHANGELOG="$tmp/CHANGELOG-hidden.md" 2> "$tmp/hidden.err"; then
  fail "a BREAKING entry under ### Changed was released"
fi
grep -q 'Breaking changes' "$tmp/hidden.err" || fail "the refusal of a hidden BREAKING entry does not say why: $(cat "$tmp/hidden.err")"

# The entry to cut goes under the section's (one) "### Breaking changes".
awk '/^## \[Unreleased\]/ && !done { print; print ""; print "### Breaking changes"; print "- check-release: a breaking entry to cut"; done = 1; sect = 1; next }
  sect && /^## \[/ { sect = 0 }
  sect && /^### Breaking changes$/ { next }
  { print }' CHANGELOG.md > "$tmp/CHANGELOG.md"
make --no-print-directory release VERSION=$version DIST="$tmp/dist" CHANGELOG="$tmp/CHANGELOG.md"
out=$tmp/dist/$version
semver=${version#v}

grep -q '^## \[0\.0\.0-ci\] - [0-9]\{4\}-[0-9][0-9]-[0-9][0-9]$' "$tmp/CHANGELOG.md" || fail "no [0.0.0-ci] section was cut"
grep -q '^## \[Unreleased\]$' "$tmp/CHANGELOG.md" || fail "the [Unreleased] section is gone"
section=$(awk '/^## \[0\.0\.0-ci\]/ {p = 1; next} p && /^## \[/ {exit} p' "$tmp/CHANGELOG.md")
grep -A1 '^### Breaking changes$' <<<"$section" | grep -q '^- check-release: a breaking entry to cut$' \
  || fail "the [0.0.0-ci] section lost its ### Breaking changes heading or entry"
grep -A1 '^### Breaking changes$' "$out/RELEASE-NOTES.md" | grep -q '^- check-release: a breaking entry to cut$' \
  || fail "RELEASE-NOTES.md lacks the section's breaking changes"

# Every artifact: in SHA256SUMS, and saying the version.
npm_tgz=standmeet-dispatcher-client-$semver.tgz
chart_tgz=dispatcher-$semver.tgz
py_version=0.0.0+ci
py_sdist=dispatcher_client-$py_version.tar.gz
for f in "dispatcher-$version-linux-amd64" "dispatcher-$version-linux-arm64" "webhook-dispatcher-$semver-oci.tar" \
  "$chart_tgz" "$npm_tgz" "$py_sdist" RELEASE-NOTES.md; do
  [ -s "$out/$f" ] || fail "the release has no $f"
  grep -q "  $f\$" "$out/SHA256SUMS" || fail "SHA256SUMS does not cover $f"
done
(cd "$out" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not verify"
got=$("$out/dispatcher-$version-linux-$(go env GOARCH)" --version)
[[ $got == "dispatcher $version "* ]] || fail "the binary prints '$got', want dispatcher $version"
chart=$(tar -xzOf "$out/$chart_tgz" dispatcher/Chart.yaml)
grep -q "^version: $semver\$" <<<"$chart" || fail "the chart's version is not $semver: $(grep '^version:' <<<"$chart")"
grep -q "^appVersion: \"$semver\"\$" <<<"$chart" || fail "the chart's appVersion is not $semver: $(grep '^appVersion:' <<<"$chart")"
tar -tzf "$out/$chart_tgz" | grep -q '^dispatcher/ci/' && fail "the chart packs ci/, which .helmignore leaves out"
got=$(tar -xzOf "$out/$npm_tgz" package/package.json | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).version))')
[ "$got" = "$semver" ] || fail "the npm package.json says version $got, want $semver"
mkdir "$tmp/py" && tar -C "$tmp/py" -xzf "$out/$py_sdist"
py=$tmp/py/dispatcher_client-$py_version
grep -qx "Version: $py_version" "$py/PKG-INFO" || fail "the Python PKG-INFO says $(grep '^Version:' "$py/PKG-INFO"), want $py_version"
grep -qx "version = \"$py_version\"" "$py/pyproject.toml" || fail "the Python pyproject.toml says $(grep '^version' "$py/pyproject.toml"), want $py_version"
got=$(cd "$py" && python3 -c 'import dispatcher_client; print(dispatcher_client.__version__)')
[ "$got" = "$py_version" ] || fail "dispatcher_client.__version__ is $got, want $py_version"
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
