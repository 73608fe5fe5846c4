#!/usr/bin/env bash
# `make check/deploy`: validates everything in deploy/ with tools built from
# the Go module proxy only (no binary downloads, no other network access).
#
#   scripts/check-deploy.sh              check deploy/
#   scripts/check-deploy.sh --write      regenerate the generated manifests, then check
#   scripts/check-deploy.sh --self-test  also break copies of deploy/ in known ways and
#                                        fail unless every breakage is caught
#   scripts/check-deploy.sh DIR          check another deploy directory (e.g. a copy)
#
# What runs (tools/deploy/go.mod and tools/render/go.mod pin the tools; this
# script the schema sources):
#   helm lint, helm template   the chart deploy/helm/dispatcher, for each value set
#                        in its ci/ (dev, prod, secrets-created)
#   kustomize build      each overlay of deploy/kustomize, and each of
#                        kustomize/examples (hand-written, using kustomize/components)
#   kubeconform -strict  every rendering, against JSON schemas built offline
#                        from Kubernetes' OpenAPI document (module
#                        k8s.io/kubernetes) and the Prometheus operator's CRDs
#                        (module github.com/prometheus-operator/prometheus-operator),
#                        both fetched with `go mod download`
#   deploycheck check    tools/deploy/cmd/deploycheck: alert rules (Prometheus'
#                        rulefmt + PromQL parser), dashboard, the chart's copies
#                        of them, the overlays rendered from the chart and equal
#                        to its renderings, cross-object consistency of every
#                        rendering, compose (compose-go), docs/operations.md
#                        (runbooks, config reference, contents); every metric
#                        and label used must exist in internal/metrics
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# The Kubernetes version whose API the manifests are validated against: the
# oldest minor still supported upstream, so nothing newer sneaks in.
K8S_VERSION=v1.35.4
# The Prometheus operator release whose CRDs define ServiceMonitor and PrometheusRule.
PROM_OPERATOR_VERSION=v0.85.0

write=false
selftest=false
deploy=deploy
for arg in "$@"; do
  case "$arg" in
    --write) write=true ;;
    --self-test) selftest=true ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    -*) echo "check-deploy: unknown flag $arg" >&2; exit 2 ;;
    *) deploy=$arg ;;
  esac
done

export GOWORK=off
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin="$root/bin/deploy-tools"
mkdir -p "$bin"

# --- tools --------------------------------------------------------------------
start=$SECONDS
(
  cd tools/deploy
  go build -o "$bin/" ./cmd/deploycheck github.com/yannh/kubeconform/cmd/kubeconform
)
(
  cd tools/render
  go build -o "$bin/" helm.sh/helm/v3/cmd/helm sigs.k8s.io/kustomize/kustomize/v5
)
echo "check-deploy: tools ready in $((SECONDS - start))s (tools/deploy, tools/render)"

# Modules used as data, downloaded (and checksum-verified) through the proxy.
# Run outside any module so that no go.mod or go.sum is touched.
module_dir() {
  local out
  out=$(cd "$tmp" && go mod download -json "$1") || { echo "$out" >&2; return 1; }
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$out"
}
start=$SECONDS
k8s_dir=$(module_dir "k8s.io/kubernetes@$K8S_VERSION")
op_dir=$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROM_OPERATOR_VERSION")
swagger="$k8s_dir/api/openapi-spec/swagger.json"
crds="$op_dir/example/prometheus-operator-crd"
[ -f "$swagger" ] || { echo "check-deploy: $swagger missing" >&2; exit 1; }
[ -d "$crds" ] || { echo "check-deploy: $crds missing" >&2; exit 1; }
echo "check-deploy: schema sources ready in $((SECONDS - start))s (k8s.io/kubernetes@$K8S_VERSION, prometheus-operator@$PROM_OPERATOR_VERSION)"

kube_version=${K8S_VERSION#v}

# render DIR OUT: helm lint and helm template for every value set of DIR's
# chart (OUT/helm-<set>.yaml), kustomize build for every overlay
# (OUT/kustomize-<overlay>.yaml); returns non-zero when any fails.
render() {
  local dir=$1 out=$2 rc=0 f set
  rm -rf "$out" && mkdir -p "$out"
  for f in "$dir"/helm/dispatcher/ci/*-values.yaml; do
    set=$(basename "$f" -values.yaml)
    if ! "$bin/helm" lint --strict --quiet --kube-version "$kube_version" "$dir/helm/dispatcher" -f "$f" >"$out/log" 2>&1; then
      echo "helm lint ($set):"; cat "$out/log"; rc=1
    fi
    if ! "$bin/helm" template dispatcher "$dir/helm/dispatcher" --kube-version "$kube_version" -f "$f" >"$out/helm-$set.yaml" 2>"$out/log"; then
      echo "helm template ($set):"; cat "$out/log"; rc=1
    fi
  done
  for f in "$dir"/kustomize/overlays/*/; do
    set=$(basename "$f")
    if ! "$bin/kustomize" build "$f" >"$out/kustomize-$set.yaml" 2>"$out/log"; then
      echo "kustomize build ($set):"; cat "$out/log"; rc=1
    fi
  done
  # Hand-written examples (overlays using the components), built so that
  # the components are validated with them.
  for f in "$dir"/kustomize/examples/*/; do
    [ -d "$f" ] || continue
    set=example-$(basename "$f")
    if ! "$bin/kustomize" build "$f" >"$out/kustomize-$set.yaml" 2>"$out/log"; then
      echo "kustomize build ($set):"; cat "$out/log"; rc=1
    fi
  done
  rm -f "$out/log"
  return $rc
}

if $write; then
  "$bin/deploycheck" generate -repo . -deploy "$deploy"
  for set in dev prod; do
    "$bin/helm" template dispatcher "$deploy/helm/dispatcher" --kube-version "$kube_version" \
      -f "$deploy/helm/dispatcher/ci/$set-values.yaml" >"$tmp/helm-$set.yaml"
  done
  "$bin/deploycheck" kustomize -dev "$tmp/helm-dev.yaml" -prod "$tmp/helm-prod.yaml" -out "$deploy/kustomize"
fi

# Schemas for the kinds the renderings use, built once per run.
schemas="$tmp/schemas"
render "$deploy" "$tmp/rendered" >/dev/null 2>&1 || true
"$bin/deploycheck" schemas -swagger "$swagger" -crds "$crds" -out "$schemas" "$tmp"/rendered/*.yaml >/dev/null

# check_dir DIR [DOCS]: every check on one deploy directory (and the
# operations guide its alerts link to); returns non-zero on failure.
check_dir() {
  local dir=$1 docs=${2:-docs/operations.md} rc=0 out="$tmp/check" args f
  echo "== $dir"
  echo "-- helm lint, helm template (Kubernetes $kube_version), kustomize build"
  render "$dir" "$out" || rc=1
  args=()
  for f in "$out"/*.yaml; do args+=(-rendered "$(basename "$f" .yaml)=$f"); done
  "$bin/deploycheck" check -repo . -deploy "$dir" -docs "$docs" "${args[@]}" || rc=1
  echo "-- kubeconform (Kubernetes $kube_version, strict): $(cd "$out" && ls *.yaml | tr '\n' ' ')"
  for f in "$out"/*.yaml; do
    "$bin/kubeconform" -strict -summary -schema-location "$schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" "$f" || rc=1
  done
  return $rc
}

rc=0
check_dir "$deploy" || rc=1
if [ $rc -ne 0 ]; then
  echo "check-deploy: FAILED" >&2
  exit 1
fi

# --- self-test: every known breakage must be caught -----------------------------
if $selftest; then
  # file | perl substitution (whole file, /m for ^) | what it breaks | the report must match this ERE
  mutations=(
    'docs/operations.md|s/^### DispatcherNoRiverLeader$/### No River leader/m|alert without its runbook section|anchor #dispatchernoriverleader does not exist'
    'docs/operations.md|s/DISPATCHER_OUTBOX_POLL/DISPATCHER_OUTBOX_POLLING/g|config reference misses a variable|does not mention DISPATCHER_OUTBOX_POLL '
    'docs/operations.md|s/ \[Tracing\]\(#tracing\) ·//|contents line misses a section|the contents paragraph links'
    'docs/operations.md|s/^## Validating deploy\/$/### Validating deploy\//m|a topic hidden among the runbooks|sits under "## Alerts"'
    'deploy/helm/dispatcher/templates/deployment.yaml|s/revisionHistoryLimit:/revisionHistoryLimt:/|unknown field|additional properties .revisionHistoryLimt. not allowed'
    'deploy/helm/dispatcher/templates/deployment.yaml|s/replicas: \{\{ \.Values\.replicaCount \}\}/replicas: "{{ .Values.replicaCount }}"/|wrong type|/spec/replicas.: got string, want integer'
    'deploy/helm/dispatcher/templates/deployment.yaml|s/^  selector:\n    matchLabels:\n.*\n//m|missing required field|missing property .selector.'
    'deploy/helm/dispatcher/values.yaml|s/^  interval: 30s$/  interval: 30 seconds/m|bad value in a CRD field|/spec/endpoints/0/interval.*does not match pattern'
    'deploy/helm/dispatcher/values.yaml|s/^  maxUnavailable: 1$/  maxUnavailable: one/m|int-or-string the schema accepts, the API server not|must be a number or a percentage'
    'deploy/helm/dispatcher/templates/service.yaml|s/targetPort: grpc/targetPort: grcp/|Service targetPort names no container port|targetPort "grcp" is not a container port'
    'deploy/helm/dispatcher/templates/networkpolicy.yaml|s/^ *- 169\.254\.0\.0\/16\n//m|metadata range no longer excluded from egress|must except 169.254.0.0/16'
    'deploy/helm/dispatcher/templates/deployment.yaml|s/DISPATCHER_LOG_LEVEL/DISPATCHER_LOGLEVEL/|env var that config.go does not read|env DISPATCHER_LOGLEVEL is not read'
    'deploy/helm/dispatcher/values.yaml|s/^terminationGracePeriodSeconds: 45$/terminationGracePeriodSeconds: 30/m|grace period shorter than shutdown|terminationGracePeriodSeconds 30 must exceed'
    'deploy/helm/dispatcher/templates/migrate-job.yaml|s/image: \{\{ include "dispatcher.image" \. \}\}/image: ghcr.io\/standmeet\/webhook-dispatcher:0.0.9/|migrate Job on another image|the migrate Job must run the version'
    'deploy/helm/dispatcher/templates/service.yaml|s/^  name: \{\{ include "dispatcher.fullname" \. \}\}$/  name: {{ include "dispatcher.fullname" . }/m|template that does not parse|parse error'
    'deploy/helm/dispatcher/ci/prod-values.yaml|s/maxReplicas: 6/maxReplicas: 8/|chart changed, overlays not rendered again|out of date with the chart'
    'deploy/kustomize/overlays/dev/deployment-dispatcher.yaml|s/replicas: 1/replicas: 2/|overlay edited by hand|out of date with the chart'
    'deploy/kustomize/overlays/prod/kustomization.yaml|s/^  - servicemonitor-dispatcher.yaml\n//m|overlay misses an object the chart renders|lacks ServiceMonitor/dispatcher'
    'deploy/prometheus/alerts.yaml|s/dispatcher_relay_lag_seconds_bucket/dispatcher_relay_lag_bucket/|alert on a metric that does not exist|selects dispatcher_relay_lag_bucket, which the dispatcher does not export'
    'deploy/prometheus/alerts.yaml|s/max by \(kind\)/max by (queue)/|alert groups by a label the metric lacks|max by \(queue\): the aggregated expression has no label "queue"'
    'deploy/prometheus/alerts.yaml|s/sum by \(le\) \(rate\(dispatcher_relay/sum(rate(dispatcher_relay/|histogram_quantile without le|histogram_quantile over an expression without the le label'
    'deploy/prometheus/alerts.yaml|s/> 300/> 600/|the chart copy out of sync with alerts.yaml|files/alerts.yaml: out of date'
    'deploy/prometheus/alerts.yaml|s/operations.md#dispatcherdown/operations.md#dispatcher-down/|runbook anchor missing from the docs|anchor #dispatcher-down does not exist'
    'deploy/prometheus/alerts.yaml|s/for: 5m/for: 5 minutes/|invalid rule file|unknown unit .* in duration .5 minutes.'
    'deploy/grafana/dispatcher-dashboard.json|s/sum by \(outcome\)/sum by (result)/|dashboard groups by a label the metric lacks|no label "result"'
    'deploy/grafana/dispatcher-dashboard.json|s/go_goroutines/go_goroutine/|dashboard queries a metric that does not exist|selects go_goroutine,'
    'deploy/grafana/dispatcher-dashboard.json|s/"schemaVersion": 39,/"schemaVersion": 39/|dashboard is not JSON|not valid JSON'
    'deploy/docker-compose.yaml|s/^    image: webhook-dispatcher:latest$/    image: webhook-dispatcher:dev/m|compose runs an image make image does not tag|want webhook-dispatcher:latest'
    'deploy/docker-compose.yaml|s/^    image: postgres:15$/    imag: postgres:15/m|compose file violates the Compose schema|services.postgres.imag false schema'
    'deploy/docker-compose.yaml|s/DISPATCHER_LOG_FORMAT: text/DISPATCHER_LOGFORMAT: text/|compose env var config.go does not read|env DISPATCHER_LOGFORMAT is not read'
    'deploy/docker-compose.yaml|s/^    pull_policy: never\n//m|compose would pull the dispatcher from a registry|pull_policy must be never'
    'deploy/docker-compose.yaml|s/^    volumes:\n      - pgdata/    ports:\n      - "127.0.0.1:5432:5432"\n    volumes:\n      - pgdata/m|compose takes the local Postgres port|publishes host port 5432'
    'docs/operations.md|s/^docker compose -f deploy\/docker-compose.yaml up$/docker compose -f deploy\/docker-compose.yaml up --build/m|docs build what compose cannot|the compose section runs --build'
  )
  echo "== self-test: ${#mutations[@]} deliberate breakages, each must be reported"
  failed=0
  for m in "${mutations[@]}"; do
    IFS='|' read -r file subst what expect <<<"$m"
    # A copy of deploy/ (named deploy/, so that paths relative to it resolve
    # as in the repository) and of the guide.
    mutant="$tmp/mutant"
    rm -rf "$mutant"
    mkdir -p "$mutant/docs"
    cp -R "$deploy" "$mutant/deploy"
    cp docs/operations.md "$mutant/docs/operations.md"
    perl -0pi -e "$subst" "$mutant/$file"
    orig="$deploy/${file#deploy/}"
    [ "${file#docs/}" = "$file" ] || orig=$file
    if cmp -s "$orig" "$mutant/$file"; then
      echo "self-test: BROKEN MUTATION, nothing changed: $what ($file: $subst)" >&2
      failed=1
      continue
    fi
    if check_dir "$mutant/deploy" "$mutant/docs/operations.md" >"$tmp/mutant.log" 2>&1; then
      echo "self-test: NOT CAUGHT: $what ($file)" >&2
      failed=1
    elif ! grep -Eq -- "$expect" "$tmp/mutant.log"; then
      echo "self-test: caught, but not by the expected check: $what (want /$expect/):" >&2
      sed 's/^/    /' "$tmp/mutant.log" >&2
      failed=1
    else
      echo "self-test: caught: $what"
      echo "           $(grep -Em1 -- "$expect" "$tmp/mutant.log" | sed 's/^ *//' | cut -c1-150)"
    fi
  done
  if [ $failed -ne 0 ]; then
    echo "check-deploy: self-test FAILED" >&2
    exit 1
  fi
fi
echo "check-deploy: ok"
