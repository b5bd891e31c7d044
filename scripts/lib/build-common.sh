# Shared by scripts/build-*.sh: where the Go-built tools are cached, the Go check, and
# the lock that makes concurrent callers wait for one build. Source it after defining log().

cache_root="${CRD_MIGRATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/crd-migrator}"

# require_go WHAT...: exit 3 (callers map it to a clear message) when Go is not installed.
require_go() {
  command -v go >/dev/null && return 0
  log "Go is required $*."
  log "Install Go 1.26 or newer (https://go.dev/doc/install) and retry."
  exit 3
}

# take_build_lock LOCKFILE WHAT: holds an exclusive lock on fd 9 until the script exits.
take_build_lock() {
  mkdir -p "$(dirname "$1")"
  exec 9>"$1"
  if ! flock -n 9; then
    log "another process is building $2; waiting for it"
    flock 9
  fi
}
