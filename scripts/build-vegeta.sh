#!/usr/bin/env bash
# Builds vegeta (github.com/tsenart/vegeta, an open-loop HTTP load generator with
# microsecond latency histograms) from its Go module at a pinned version into a
# per-version cache outside the repository. Only `npm run bench` needs it: it drives the
# webhook at a fixed rate and at saturation.
# Safe to run concurrently: a lock file makes every caller after the first wait for the
# first build and then reuse it.
#
# Usage: scripts/build-vegeta.sh
#   prints one line on stdout:  vegeta=<path of the vegeta binary>
# Env:   VEGETA_VERSION overrides the pin; CRD_MIGRATOR_CACHE the cache root.
set -euo pipefail

VEGETA_VERSION="${VEGETA_VERSION:-v12.12.0}"
module="github.com/tsenart/vegeta/v12"

log() { echo "[vegeta-build] $*" >&2; }
# shellcheck source=lib/build-common.sh
source "$(dirname "$0")/lib/build-common.sh"
out_dir="$cache_root/tools/vegeta-$VEGETA_VERSION"

have_all() { [ -x "$out_dir/vegeta" ]; }
report() { echo "vegeta=$out_dir/vegeta"; }

if have_all; then report; exit 0; fi

require_go "to build vegeta from its Go module (or run the bench with --skip-webhook)"
take_build_lock "$cache_root/tools/.vegeta-build.lock" "vegeta"
if have_all; then report; exit 0; fi

start=$(date +%s)
log "building $module $VEGETA_VERSION (a cold build takes about half a minute on 2 cores)"
rm -rf "$out_dir.tmp"; mkdir -p "$out_dir.tmp"
# `go install pkg@version` builds exactly the released module graph (its own go.mod).
# GOTOOLCHAIN=local: fail with Go's own message rather than fetch a toolchain.
GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$out_dir.tmp" go install -trimpath -ldflags "-s -w" "$module@$VEGETA_VERSION"
"$out_dir.tmp/vegeta" -version >&2
rm -rf "$out_dir"; mv "$out_dir.tmp" "$out_dir"
log "built in $(( $(date +%s) - start ))s into $out_dir"
report
