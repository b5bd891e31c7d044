#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, etcd and etcdctl from Go modules at pinned
# versions into a per-version cache outside the repository. Safe to run concurrently: a lock file makes
# every caller after the first wait for the first build and then reuse it.
#
# Usage: scripts/build-controlplane.sh            (prints the bin directory on stdout)
# Env:   CRD_MIGRATOR_KUBE_VERSION picks the Kubernetes release (default the newest we test,
#        v1.37.2; v1.30.14 is the oldest the README claims and tests); ETCD_VERSION overrides its etcd;
#        CRD_MIGRATOR_CACHE the cache root. (KUBE_VERSION is still read, for old callers.)
set -euo pipefail

KUBE_VERSION="${CRD_MIGRATOR_KUBE_VERSION:-${KUBE_VERSION:-v1.37.2}}"
# The etcd release each k8s.io/kubernetes version requires in its go.mod (and envtest ships).
case "$KUBE_VERSION" in
  v1.37.*) default_etcd=v3.7.0 ;;
  v1.36.*) default_etcd=v3.6.8 ;;
  v1.35.*) default_etcd=v3.6.5 ;;
  v1.30.*) default_etcd=v3.5.10 ;;
  *) default_etcd="" ;;
esac
ETCD_VERSION="${ETCD_VERSION:-$default_etcd}"
if [ -z "$ETCD_VERSION" ]; then
  echo "[controlplane-build] no etcd pin for Kubernetes $KUBE_VERSION: set ETCD_VERSION (the go.etcd.io/etcd/client/v3 version its go.mod requires)" >&2
  exit 2
fi

log() { echo "[controlplane-build] $*" >&2; }
# shellcheck source=lib/build-common.sh
source "$(dirname "$0")/lib/build-common.sh"
bin_dir="$cache_root/bin/kube-$KUBE_VERSION-etcd-$ETCD_VERSION"

have_all() {
  for b in kube-apiserver kube-controller-manager etcd etcdctl; do [ -x "$bin_dir/$b" ] || return 1; done
}

if have_all; then echo "$bin_dir"; exit 0; fi

require_go "to build the control-plane binaries (kube-apiserver, kube-controller-manager, etcd)"
take_build_lock "$cache_root/bin/.build.lock" "the control-plane binaries"
if have_all; then echo "$bin_dir"; exit 0; fi

work="$cache_root/build/kube-$KUBE_VERSION-etcd-$ETCD_VERSION"
rm -rf "$work"; mkdir -p "$work/kube" "$work/etcd" "$bin_dir.tmp"
start=$(date +%s)

# --- kube-apiserver --------------------------------------------------------------------
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with local
# paths, which do not apply to a dependent module; map each one to its published v0.X.Y.
log "resolving k8s.io/kubernetes@$KUBE_VERSION"
kube_gomod=$(cd "$work/kube" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
staging_version="v0.${KUBE_VERSION#v1.}"
{
  echo "module crd-migrator.local/controlplane-build"
  echo
  echo "go 1.26.0"
  echo
  echo "require k8s.io/kubernetes $KUBE_VERSION"
  echo
  echo "replace ("
  sed -n '/^replace (/,/^)/p' "$kube_gomod" | grep -o 'k8s.io/[a-z0-9-]* =>' | sed 's/ =>//' |
    while read -r mod; do echo "	$mod => $mod $staging_version"; done
  echo ")"
} > "$work/kube/go.mod"

minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
# kube-controller-manager shares most packages with kube-apiserver: one build, one cache.
log "building kube-apiserver and kube-controller-manager $KUBE_VERSION (a cold build takes 10+ minutes on 2 cores)"
(cd "$work/kube" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" \
  -o "$bin_dir.tmp/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager)

# --- etcd and etcdctl --------------------------------------------------------------------
log "building etcd and etcdctl $ETCD_VERSION"
cat > "$work/etcd/go.mod" <<GOMOD
module crd-migrator.local/etcd-build

go 1.26.0

require (
	go.etcd.io/etcd/server/v3 $ETCD_VERSION
	go.etcd.io/etcd/etcdctl/v3 $ETCD_VERSION
)
GOMOD
(cd "$work/etcd" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w" -o "$bin_dir.tmp/etcd" go.etcd.io/etcd/server/v3 \
  && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w" -o "$bin_dir.tmp/etcdctl" go.etcd.io/etcd/etcdctl/v3)

rm -rf "$bin_dir"; mv "$bin_dir.tmp" "$bin_dir"; rm -rf "$work"
log "built in $(( $(date +%s) - start ))s into $bin_dir"
echo "$bin_dir"
