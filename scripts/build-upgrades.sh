#!/usr/bin/env bash
# Builds what test/integration/real-upgrades.test.ts needs to upgrade real operators, from
# Go modules at pinned versions, into the cache outside the repository (nothing here is ever
# committed):
#   - Cluster API's conversion webhook for its core types: dev/tools/capi-conversion/main.go,
#     built in a generated module requiring sigs.k8s.io/cluster-api at CAPI_VERSION (so CAPI's
#     go.mod decides every dependency), cached per version and per hash of main.go;
#   - Tekton Pipelines' conversion webhook: dev/tools/tekton-conversion/main.go, the same way
#     over github.com/tektoncd/pipeline at TEKTON_VERSION;
#   - the CRDs of clusters, machinedeployments, machinesets and machines (cluster.x-k8s.io),
#     taken from the cluster-api module of each of CAPI_CRD_VERSIONS (config/crd/bases/ in
#     v1.10 and v1.11, core/config/crd/bases/ in v1.14), and of tasks, pipelines, taskruns and pipelineruns
#     (tekton.dev) from the pipeline module of each of TEKTON_CRD_VERSIONS (config/300-*.yaml),
#     one file per CRD named <plural>.<group>.yaml.
# Safe to run concurrently: a lock file makes every caller after the first wait for the
# first build and then reuse it.
#
# Usage: scripts/build-upgrades.sh
#   prints on stdout:   capi-conversion=<binary>
#                       tekton-conversion=<binary>
#                       capi-crds-<version>=<directory>     (one line per CAPI_CRD_VERSIONS)
#                       tekton-crds-<version>=<directory>   (one line per TEKTON_CRD_VERSIONS)
# Env:   CAPI_VERSION, TEKTON_VERSION (the webhooks' modules), CAPI_CRD_VERSIONS,
#        TEKTON_CRD_VERSIONS (space-separated) override the pins; CRD_MIGRATOR_CACHE the cache root.
set -euo pipefail

CAPI_VERSION="${CAPI_VERSION:-v1.11.0}"
TEKTON_VERSION="${TEKTON_VERSION:-v0.49.0}"
CAPI_CRD_VERSIONS="${CAPI_CRD_VERSIONS:-v1.10.6 v1.11.0 v1.14.2}"
TEKTON_CRD_VERSIONS="${TEKTON_CRD_VERSIONS:-v0.48.0 v0.49.0}"
CAPI_KINDS="clusters machinedeployments machinesets machines"
TEKTON_KINDS="task:tasks pipeline:pipelines taskrun:taskruns pipelinerun:pipelineruns"

log() { echo "[upgrades-build] $*" >&2; }
# shellcheck source=lib/build-common.sh
source "$(dirname "$0")/lib/build-common.sh"
repo="$(cd "$(dirname "$0")/.." && pwd)"
capi_main="$repo/dev/tools/capi-conversion/main.go"
tekton_main="$repo/dev/tools/tekton-conversion/main.go"
capi_bin_dir="$cache_root/upgrades/capi-$CAPI_VERSION/bin-$(sha256sum "$capi_main" | cut -c1-12)"
tekton_bin_dir="$cache_root/upgrades/tekton-$TEKTON_VERSION/bin-$(sha256sum "$tekton_main" | cut -c1-12)"
capi_crds() { echo "$cache_root/upgrades/capi-$1/crds"; }
tekton_crds() { echo "$cache_root/upgrades/tekton-$1/crds"; }

have_all() {
  [ -x "$capi_bin_dir/capi-conversion" ] && [ -x "$tekton_bin_dir/tekton-conversion" ] || return 1
  local v
  for v in $CAPI_CRD_VERSIONS; do [ -f "$(capi_crds "$v")/.complete" ] || return 1; done
  for v in $TEKTON_CRD_VERSIONS; do [ -f "$(tekton_crds "$v")/.complete" ] || return 1; done
}
report() {
  echo "capi-conversion=$capi_bin_dir/capi-conversion"
  echo "tekton-conversion=$tekton_bin_dir/tekton-conversion"
  local v
  for v in $CAPI_CRD_VERSIONS; do echo "capi-crds-$v=$(capi_crds "$v")"; done
  for v in $TEKTON_CRD_VERSIONS; do echo "tekton-crds-$v=$(tekton_crds "$v")"; done
}

if have_all; then report; exit 0; fi

require_go "to build Cluster API's and Tekton's conversion webhooks and to fetch their CRDs from their Go modules"
take_build_lock "$cache_root/upgrades/.build.lock" "the operators' conversion webhooks"
if have_all; then report; exit 0; fi

work="$cache_root/build/upgrades"
rm -rf "$work"; mkdir -p "$work/modules"
start=$(date +%s)

# Directory of a module version in the module cache, downloading it through the proxy.
module_dir() {
  (cd "$work/modules" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json "$1" |
    sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')
}

# build_webhook NAME MODULE VERSION MAIN_GO DEST_DIR: main.go in a generated module requiring
# MODULE@VERSION. GOTOOLCHAIN=local: if the module's go.mod ever asks for a newer Go than the
# one installed, fail with Go's own message instead of fetching a toolchain.
build_webhook() {
  local name="$1" module="$2" version="$3" main="$4" dest="$5"
  [ -x "$dest/$name" ] && return 0
  mkdir -p "$work/$name"
  cat > "$work/$name/go.mod" <<GOMOD
module crd-migrator.local/$name-build

go 1.26.0

require $module $version
GOMOD
  cp "$main" "$work/$name/main.go"
  log "building $name from $module $version (a cold build takes a few minutes on 2 cores)"
  local t0; t0=$(date +%s)
  rm -rf "$dest.tmp"; mkdir -p "$dest.tmp"
  (cd "$work/$name" && GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$dest.tmp/$name" .)
  rm -rf "$dest"; mv "$dest.tmp" "$dest"
  log "$name built in $(( $(date +%s) - t0 ))s"
}

build_webhook capi-conversion sigs.k8s.io/cluster-api "$CAPI_VERSION" "$capi_main" "$capi_bin_dir"
build_webhook tekton-conversion github.com/tektoncd/pipeline "$TEKTON_VERSION" "$tekton_main" "$tekton_bin_dir"

# --- CRDs --------------------------------------------------------------------------------
# The module cache is read-only; copy the files (not their modes) into our cache.
for v in $CAPI_CRD_VERSIONS; do
  dest="$(capi_crds "$v")"
  [ -f "$dest/.complete" ] && continue
  log "fetching Cluster API $v's core CRDs from its Go module"
  dir="$(module_dir "sigs.k8s.io/cluster-api@$v")"
  src="$dir/config/crd/bases"
  [ -d "$src" ] || src="$dir/core/config/crd/bases" # the layout of v1.14
  rm -rf "$dest.tmp"; mkdir -p "$dest.tmp"
  for k in $CAPI_KINDS; do
    f="$src/cluster.x-k8s.io_$k.yaml"
    if [ ! -s "$f" ]; then
      log "no $f: the cluster-api module layout changed; update scripts/build-upgrades.sh"
      exit 1
    fi
    cat "$f" > "$dest.tmp/$k.cluster.x-k8s.io.yaml"
  done
  touch "$dest.tmp/.complete"
  rm -rf "$dest"; mv "$dest.tmp" "$dest"
done

for v in $TEKTON_CRD_VERSIONS; do
  dest="$(tekton_crds "$v")"
  [ -f "$dest/.complete" ] && continue
  log "fetching Tekton Pipelines $v's CRDs from its Go module"
  dir="$(module_dir "github.com/tektoncd/pipeline@$v")"
  rm -rf "$dest.tmp"; mkdir -p "$dest.tmp"
  for pair in $TEKTON_KINDS; do
    f="$dir/config/300-${pair%%:*}.yaml"
    [ -s "$f" ] || f="$dir/config/300-crds/300-${pair%%:*}.yaml" # the layout of later releases
    if [ ! -s "$f" ]; then
      log "no 300-${pair%%:*}.yaml under $dir/config: the pipeline module layout changed; update scripts/build-upgrades.sh"
      exit 1
    fi
    cat "$f" > "$dest.tmp/${pair##*:}.tekton.dev.yaml"
  done
  touch "$dest.tmp/.complete"
  rm -rf "$dest"; mv "$dest.tmp" "$dest"
done

rm -rf "$work"
log "ready in $(( $(date +%s) - start ))s under $cache_root/upgrades"
report
