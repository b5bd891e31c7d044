#!/usr/bin/env bash
# Builds kube-storage-version-migrator's `migrator` command (the controller that rewrites
# objects for StorageVersionMigration resources) from its Go module at a pinned version,
# and copies the StorageVersionMigration and StorageState CRDs that ship in the same
# module, into a per-version cache outside the repository. The bench and the tests of the
# chart's copies of those CRDs need it.
# Safe to run concurrently: a lock file makes every caller after the first wait for the
# first build and then reuse it.
#
# Usage: scripts/build-ksvm.sh [--check]
#   --check: build nothing; exit 0 (printing the paths) when the build is cached, else 4.
#   prints three lines on stdout:  migrator=<path of the migrator binary>
#                                  crd=<path of storage_migration_crd.yaml>
#                                  state_crd=<path of storage_state_crd.yaml>
# Env:   KSVM_VERSION overrides the pin; CRD_MIGRATOR_CACHE the cache root.
#
# The pin: v0.0.5 is the newest release the Go module proxy serves here (v0.0.6 answers
# 403 "not available" from proxy.golang.org at the time of writing); the migrator's
# object-rewriting loop is the same in both (list 500 at a time, one PUT at a time).
set -euo pipefail

KSVM_VERSION="${KSVM_VERSION:-v0.0.5}"
module="sigs.k8s.io/kube-storage-version-migrator"

log() { echo "[ksvm-build] $*" >&2; }
# shellcheck source=lib/build-common.sh
source "$(dirname "$0")/lib/build-common.sh"
out_dir="$cache_root/tools/ksvm-$KSVM_VERSION"

have_binary() { [ -x "$out_dir/migrator" ] && [ -s "$out_dir/storage_migration_crd.yaml" ]; }
have_all() { have_binary && [ -s "$out_dir/storage_state_crd.yaml" ]; }
report() { echo "migrator=$out_dir/migrator"; echo "crd=$out_dir/storage_migration_crd.yaml"; echo "state_crd=$out_dir/storage_state_crd.yaml"; }
# The module's directory in the Go module cache (downloaded when missing).
module_dir() { (cd "$1" && GOFLAGS=-mod=mod go mod download -json "$module@$KSVM_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p'); }

if have_all; then report; exit 0; fi
if [ "${1:-}" = "--check" ]; then log "not built yet: $out_dir"; exit 4; fi

require_go "to build kube-storage-version-migrator from its Go module (or run the bench with --skip-ksvm)"
take_build_lock "$cache_root/tools/.ksvm-build.lock" "kube-storage-version-migrator"
if have_all; then report; exit 0; fi
if have_binary; then
  # A cache from before the StorageState CRD was copied: add it, no rebuild.
  mkdir -p "$cache_root/build"
  src=$(module_dir "$cache_root/build")
  if [ -z "$src" ] || [ ! -s "$src/manifests/storage_state_crd.yaml" ]; then
    log "no manifests/storage_state_crd.yaml in $module@$KSVM_VERSION; see the go output above"
    exit 1
  fi
  cat "$src/manifests/storage_state_crd.yaml" > "$out_dir/storage_state_crd.yaml.tmp"
  mv "$out_dir/storage_state_crd.yaml.tmp" "$out_dir/storage_state_crd.yaml"
  report; exit 0
fi

work="$cache_root/build/ksvm-$KSVM_VERSION"
rm -rf "$work"; mkdir -p "$work"
start=$(date +%s)

log "fetching $module@$KSVM_VERSION"
src=$(module_dir "$work")
if [ -z "$src" ] || [ ! -d "$src/cmd/migrator" ]; then
  log "could not download $module@$KSVM_VERSION (or it has no cmd/migrator); see the go output above"
  exit 1
fi
if [ ! -s "$src/manifests/storage_migration_crd.yaml" ] || [ ! -s "$src/manifests/storage_state_crd.yaml" ]; then
  log "no manifests/storage_migration_crd.yaml or storage_state_crd.yaml in $src: the module layout changed; update scripts/build-ksvm.sh"
  exit 1
fi

# A wrapper module requiring the pinned version: its go.mod (client-go v0.21 era) decides
# every dependency version through minimal version selection, so this builds what upstream
# released. (Module zips leave vendor/ out, so -mod=vendor inside the module cannot work.)
# GOTOOLCHAIN=local: fail with Go's own message rather than fetch a toolchain.
cat > "$work/go.mod" <<GOMOD
module crd-migrator.local/ksvm-build

go 1.25.0

require $module $KSVM_VERSION
GOMOD
log "building $module/cmd/migrator $KSVM_VERSION (a cold build takes a minute or two on 2 cores)"
rm -rf "$out_dir.tmp"; mkdir -p "$out_dir.tmp"
(cd "$work" && GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
  -o "$out_dir.tmp/migrator" "$module/cmd/migrator")
cat "$src/manifests/storage_migration_crd.yaml" > "$out_dir.tmp/storage_migration_crd.yaml"
cat "$src/manifests/storage_state_crd.yaml" > "$out_dir.tmp/storage_state_crd.yaml"
rm -rf "$out_dir"; mv "$out_dir.tmp" "$out_dir"; rm -rf "$work"
log "built in $(( $(date +%s) - start ))s into $out_dir"
report
