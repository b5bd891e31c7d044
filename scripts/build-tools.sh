#!/usr/bin/env bash
# Builds the tools the chart checks need, from Go modules at pinned versions, into a
# per-version cache outside the repository (nothing here is ever committed):
#   - helm, built from helm.sh/helm/v4/cmd/helm;
#   - cert-manager's CustomResourceDefinitions, taken from the cert-manager Go module
#     (its deploy/crds/ directory ships in the module zip), so the kube-apiserver can
#     check the chart's Issuer and Certificate in a server-side dry-run;
#   - the Prometheus Operator's ServiceMonitor and PrometheusRule CRDs, from the
#     prometheus-operator Go module (example/prometheus-operator-crd/), for the chart's
#     optional ServiceMonitor and PrometheusRule;
#   - cert-manager itself (its certificates, SelfSigned/CA issuer and issuer controllers and
#     its cainjector, in one process): dev/tools/cert-manager/main.go, a thin main over the
#     same cert-manager Go module (the proxy does not serve upstream's binary modules), built
#     in a generated module requiring it, so cert-manager's go.mod decides every dependency.
#     Cached per cert-manager version and per hash of main.go (an edit rebuilds it).
# Safe to run concurrently: a lock file makes every caller after the first wait for the
# first build and then reuse it.
#
# Usage: scripts/build-tools.sh
#   prints five lines on stdout:   helm=<path of the helm binary>
#                                  cert-manager-crds=<directory of CRD YAML files>
#                                  servicemonitor-crd=<CRD YAML file>
#                                  prometheusrule-crd=<CRD YAML file>
#                                  cert-manager=<path of the cert-manager binary>
# Env:   HELM_VERSION, CERT_MANAGER_VERSION, PROMETHEUS_OPERATOR_VERSION override the pins;
#        CRD_MIGRATOR_CACHE the cache root.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v4.3.1}"
CERT_MANAGER_VERSION="${CERT_MANAGER_VERSION:-v1.21.2}"
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"

log() { echo "[tools-build] $*" >&2; }
# shellcheck source=lib/build-common.sh
source "$(dirname "$0")/lib/build-common.sh"
helm_dir="$cache_root/tools/helm-$HELM_VERSION"
crds_dir="$cache_root/tools/cert-manager-$CERT_MANAGER_VERSION/crds"
sm_dir="$cache_root/tools/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION"
sm_crd="$sm_dir/monitoring.coreos.com_servicemonitors.yaml"
pr_crd="$sm_dir/monitoring.coreos.com_prometheusrules.yaml"
cm_main="$(cd "$(dirname "$0")/.." && pwd)/dev/tools/cert-manager/main.go"
cm_dir="$cache_root/tools/cert-manager-$CERT_MANAGER_VERSION/bin-$(sha256sum "$cm_main" | cut -c1-12)"

have_helm() { [ -x "$helm_dir/helm" ]; }
have_crds() { [ -f "$crds_dir/.complete" ]; }
have_sm() { [ -s "$sm_crd" ] && [ -s "$pr_crd" ]; }
have_cm() { [ -x "$cm_dir/cert-manager" ]; }
have_all() { have_helm && have_crds && have_sm && have_cm; }
report() {
  echo "helm=$helm_dir/helm"; echo "cert-manager-crds=$crds_dir"
  echo "servicemonitor-crd=$sm_crd"; echo "prometheusrule-crd=$pr_crd"
  echo "cert-manager=$cm_dir/cert-manager"
}

if have_all; then report; exit 0; fi

require_go "to build helm and to fetch cert-manager's CRDs from its Go module"
take_build_lock "$cache_root/tools/.build.lock" "the tools"
if have_all; then report; exit 0; fi

work="$cache_root/build/tools-helm-$HELM_VERSION"
rm -rf "$work"; mkdir -p "$work/helm" "$work/modules" "$work/cert-manager"
start=$(date +%s)

# --- helm ------------------------------------------------------------------------------
if ! have_helm; then
  helm_major="${HELM_VERSION%%.*}"          # v4
  helm_module="helm.sh/helm/$helm_major"
  # GOTOOLCHAIN=local: if helm's go.mod ever asks for a newer Go than the one installed,
  # fail with Go's own message instead of fetching a toolchain.
  cat > "$work/helm/go.mod" <<GOMOD
module crd-migrator.local/helm-build

go 1.26.0

require $helm_module $HELM_VERSION
GOMOD
  # The same ldflags helm's Makefile sets for a tagged release. Helm takes the Kubernetes
  # version it assumes for `helm template` (.Capabilities.KubeVersion) from the client-go
  # version in the binary's build info, which a module build records as usual.
  ldflags="-s -w -X $helm_module/internal/version.version=$HELM_VERSION"
  ldflags="$ldflags -X $helm_module/internal/version.metadata= -X $helm_module/internal/version.gitTreeState=clean"
  log "building helm $HELM_VERSION from $helm_module (a cold build takes a few minutes on 2 cores)"
  rm -rf "$helm_dir.tmp"; mkdir -p "$helm_dir.tmp"
  (cd "$work/helm" && GOTOOLCHAIN=local CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" \
    -o "$helm_dir.tmp/helm" "$helm_module/cmd/helm")
  "$helm_dir.tmp/helm" version --short >&2
  rm -rf "$helm_dir"; mv "$helm_dir.tmp" "$helm_dir"
fi

# Directory of a module version in the module cache, downloading it through the proxy.
module_dir() {
  (cd "$work/modules" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json "$1" |
    sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')
}

# --- cert-manager CRDs -----------------------------------------------------------------
if ! have_crds; then
  log "fetching cert-manager $CERT_MANAGER_VERSION's CRDs from its Go module"
  src="$(module_dir "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION")/deploy/crds"
  if ! ls "$src"/*.yaml >/dev/null 2>&1; then
    log "no CRD YAML in $src: the cert-manager module layout changed; update scripts/build-tools.sh"
    exit 1
  fi
  rm -rf "$crds_dir.tmp"; mkdir -p "$crds_dir.tmp"
  # The module cache is read-only; copy the files (not their modes) into our cache.
  for f in "$src"/*.yaml; do cat "$f" > "$crds_dir.tmp/$(basename "$f")"; done
  touch "$crds_dir.tmp/.complete"
  rm -rf "$crds_dir"; mv "$crds_dir.tmp" "$crds_dir"
fi

# --- ServiceMonitor and PrometheusRule CRDs ----------------------------------------------
if ! have_sm; then
  log "fetching the ServiceMonitor and PrometheusRule CRDs from prometheus-operator $PROMETHEUS_OPERATOR_VERSION's Go module"
  src_dir="$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")/example/prometheus-operator-crd"
  mkdir -p "$sm_dir"
  for dest in "$sm_crd" "$pr_crd"; do
    src="$src_dir/$(basename "$dest")"
    if [ ! -s "$src" ]; then
      log "no $src: the prometheus-operator module layout changed; update scripts/build-tools.sh"
      exit 1
    fi
    cat "$src" > "$dest.tmp" && mv "$dest.tmp" "$dest"
  done
fi

# --- cert-manager (controller + cainjector) ---------------------------------------------
if ! have_cm; then
  cm_module="github.com/cert-manager/cert-manager"
  cat > "$work/cert-manager/go.mod" <<GOMOD
module crd-migrator.local/cert-manager-build

go 1.26.0

require $cm_module $CERT_MANAGER_VERSION
GOMOD
  cp "$cm_main" "$work/cert-manager/main.go"
  log "building cert-manager $CERT_MANAGER_VERSION (controller + cainjector) from $cm_module (a cold build takes 2-4 minutes on 2 cores)"
  rm -rf "$cm_dir.tmp"; mkdir -p "$cm_dir.tmp"
  (cd "$work/cert-manager" && GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X $cm_module/pkg/util.AppVersion=$CERT_MANAGER_VERSION" \
    -o "$cm_dir.tmp/cert-manager" .)
  rm -rf "$cm_dir"; mv "$cm_dir.tmp" "$cm_dir"
fi

rm -rf "$work"
log "ready in $(( $(date +%s) - start ))s under $cache_root/tools"
report
