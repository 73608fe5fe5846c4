#!/usr/bin/env bash
# `make release VERSION=vX.Y.Z`: everything a release ships, built here
# without Docker or a registry, into dist/<version>/:
#
#   dispatcher-<version>-linux-amd64, -linux-arm64   static binaries, version stamped
#   webhook-dispatcher-<X.Y.Z>-oci.tar               the multi-arch image index as an OCI archive
#   oci/                                             the same as an OCI layout (make push sends it)
#   image-index.digest                               the index's digest
#   dispatcher-<X.Y.Z>.tgz                           the Helm chart, version and appVersion X.Y.Z
#   standmeet-dispatcher-client-<X.Y.Z>.tgz          the TypeScript client (npm install it; needs make deps/ts)
#   dispatcher_client-<X.Y.Z>.tar.gz                 the Python client's source archive (pip install it;
#                                                    a pre-release in PEP 440 spelling: 0.0.0-ci is 0.0.0+ci)
#   RELEASE-NOTES.md                                 CHANGELOG.md's section for the version
#   SHA256SUMS                                       checksums of all the files above
#
# Every artifact says the one version: the binaries' --version, the image's
# annotations, the chart's Chart.yaml, the npm package.json, the Python
# PKG-INFO, pyproject.toml and dispatcher_client.__version__ (set in the
# packed copies; the committed chart and clients are not edited).
#
# CHANGELOG.md: if it has no section for the version yet, its [Unreleased]
# entries become "## [X.Y.Z] - <today>" under a new, empty [Unreleased]
# (commit that, tag vX.Y.Z, and run make release again from the tag so the
# artifacts name the tagged commit). An empty [Unreleased] is refused. Its
# "### Breaking changes" heading moves with its entries into the versioned
# section; a section whose entries say "BREAKING" but has no such heading is
# refused, so a breaking change cannot hide under "Changed".
#
# Environment: CHANGELOG (default CHANGELOG.md) and DIST (default dist), for
# trying it out on copies (CI does); GO (default go).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "release: $*" >&2; exit 1; }

version=${1:-}
changelog=${CHANGELOG:-CHANGELOG.md}
dist=${DIST:-dist}
go=${GO:-go}
if ! [[ $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
  die "VERSION must be vMAJOR.MINOR.PATCH[-pre], as the git tag is spelled: make release VERSION=v0.1.0 (got '$version')"
fi
semver=${version#v}
out=$dist/$version
[ -f "$changelog" ] || die "$changelog does not exist"

# --- CHANGELOG section ----------------------------------------------------------
heading_re="^## \\[${semver//./\\.}\\]"
if ! grep -Eq "$heading_re" "$changelog"; then
  grep -q '^## \[Unreleased\]' "$changelog" || die "$changelog has neither a [$semver] nor an [Unreleased] section"
  entries=$(awk '/^## \[Unreleased\]/ {p = 1; next} p && /^## \[/ {exit} p && /^- / {n++} END {print n + 0}' "$changelog")
  [ "$entries" -gt 0 ] || die "$changelog: [Unreleased] has no entries to release as $semver"
  unreleased=$(awk '/^## \[Unreleased\]/ {p = 1; next} p && /^## \[/ {exit} p' "$changelog")
  if grep -q 'BREAKING' <<<"$unreleased" && ! grep -q '^### Breaking changes$' <<<"$unreleased"; then
    die "$changelog: [Unreleased] has an entry marked BREAKING but no \"### Breaking changes\" heading: move it there"
  fi
  awk -v heading="## [$semver] - $(date -u +%Y-%m-%d)" '
    /^## \[Unreleased\]/ && !done { print; print ""; print heading; done = 1; next }
    { print }' "$changelog" > "$changelog.new"
  mv "$changelog.new" "$changelog"
  echo "release: $changelog: [Unreleased] is now [$semver] ($entries entries); commit it and tag $version"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
awk -v h="## [$semver]" 'index($0, h) == 1 {p = 1; print; next} p && /^## \[/ {exit} p' "$changelog" > "$out/RELEASE-NOTES.md"
[ -s "$out/RELEASE-NOTES.md" ] || die "could not extract the [$semver] section of $changelog"

# The packaged chart (below) gets the version; the committed one, and the
# Kustomize overlays rendered from it, name the image by the committed
# appVersion: a release of another version wants both moved in the repository.
chart_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' deploy/helm/dispatcher/Chart.yaml 2>/dev/null || true)
if [ -n "$chart_version" ] && [ "$chart_version" != "$semver" ]; then
  echo "release: deploy/helm/dispatcher/Chart.yaml has appVersion $chart_version (the packaged chart says $semver): for publishing $version set its version and appVersion to $semver and run scripts/check-deploy.sh --write (the overlays name the image by it)" >&2
fi

# --- what the artifacts say they were built from --------------------------------
revision=$(git rev-parse HEAD 2>/dev/null || true)
[ -n "$revision" ] || die "not a git checkout: the artifacts name the commit they were built from"
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  revision="$revision-dirty"
  echo "release: the work tree has uncommitted changes: the artifacts name $revision" >&2
elif [ "$(git describe --tags --exact-match 2>/dev/null || true)" != "$version" ]; then
  echo "release: HEAD is not tagged $version: fine for trying it out, not for publishing" >&2
fi

# --- binaries -------------------------------------------------------------------
binaries=()
for arch in amd64 arm64; do
  bin="$out/dispatcher-$version-linux-$arch"
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch "$go" build -trimpath -ldflags "-s -w -X main.version=$version" -o "$bin" ./cmd/dispatcher
  binaries+=(-binary "$arch=$bin")
done

# --- image ----------------------------------------------------------------------
"$go" -C tools/image run . release "${binaries[@]}" -version "$version" -revision "$revision" -out "$out"

# --- the TypeScript client's npm tarball -----------------------------------------
npm_tarball=()
if [ -d clients/typescript/node_modules ]; then
  scripts/ts-pack.sh "$out" "$version"
  npm_tarball=("standmeet-dispatcher-client-$semver.tgz")
else
  echo "release: clients/typescript/node_modules is missing (make deps/ts): no npm tarball" >&2
fi

# --- the Helm chart ---------------------------------------------------------------
# As helm package lays it out (dispatcher/ at the top, .helmignore's entries
# left out), without needing helm: a copy with version and appVersion set.
chart_stage=$(mktemp -d)
trap 'rm -rf "$chart_stage"' EXIT
cp -R deploy/helm/dispatcher "$chart_stage/dispatcher"
rm -rf "$chart_stage/dispatcher/ci" "$chart_stage/dispatcher/.helmignore"
find "$chart_stage/dispatcher" -name '*.md.tmpl' -delete
sed -i -e "s/^version: .*/version: $semver/" -e "s/^appVersion: .*/appVersion: \"$semver\"/" "$chart_stage/dispatcher/Chart.yaml"
grep -q "^version: $semver\$" "$chart_stage/dispatcher/Chart.yaml" && grep -q "^appVersion: \"$semver\"\$" "$chart_stage/dispatcher/Chart.yaml" \
  || die "could not set the chart's version and appVersion to $semver"
chart_tarball="dispatcher-$semver.tgz"
tar -C "$chart_stage" --sort=name --mtime=@946684800 --owner=0 --group=0 --numeric-owner -cf - dispatcher | gzip -n > "$out/$chart_tarball"

# --- the Python client's source archive ----------------------------------------
py_sdist=$(python3 scripts/py-sdist.py "$out" "$version") || die "the Python source archive failed"

# --- checksums ------------------------------------------------------------------
(
  cd "$out"
  sha256sum "dispatcher-$version-linux-amd64" "dispatcher-$version-linux-arm64" \
    "webhook-dispatcher-$semver-oci.tar" "$chart_tarball" ${npm_tarball[@]+"${npm_tarball[@]}"} "$py_sdist" RELEASE-NOTES.md > SHA256SUMS
)
echo "release: $out/"
ls -l "$out" | sed 1d | awk '{printf "  %10s  %s\n", $5, $NF}'
echo "release: image index $(cat "$out/image-index.digest"); push it with make push IMAGE=<registry>/<repository> VERSION=$version"
