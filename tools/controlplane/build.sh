#!/usr/bin/env bash
# Builds the pinned control-plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok, and the real node's kubelet and kube-proxy) from the Go module proxy with the machine's Go, into a cache outside
# the work tree, once per version. Prints the folder holding them on its last line.
#
#   CLAIR_OPERATOR_CACHE   cache root (default ~/.cache/clair-operator)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

die() { echo "build.sh: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 ||
  die "Go is not installed. Install Go 1.24 or newer (on these machines it is preinstalled; elsewhere see https://go.dev/doc/install) and run again."
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
[ "${go_minor:-0}" -ge 24 ] || die "Go $(go env GOVERSION) is too old: Kubernetes $KUBERNETES_VERSION needs Go 1.24 or newer."

# The wrapper modules must pin the versions this file names.
pins() { # pins MODULE_DIR MODULE VERSION
  grep -qE "^(require )?[[:space:]]*$2 $3( //.*)?\$" "$here/$1/go.mod" ||
    die "$1/go.mod does not require $2 $3 as versions.env says: make them agree"
}
pins kubernetes k8s.io/kubernetes "$KUBERNETES_VERSION"
pins etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
pins kwok sigs.k8s.io/kwok "$KWOK_VERSION"

cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
bin="$cache/controlplane/k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION"
mkdir -p "$bin"

# go.sum is committed, so no checksum database is needed; never fetch another toolchain.
export GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0

# One build at a time per cache, so parallel test runs don't race.
exec 9>"$bin/.lock"
flock 9

build() { # build MODULE_DIR OUTPUT PACKAGE [LDFLAGS]
  local dir=$1 out=$2 pkg=$3 ldflags=${4:-}
  [ -x "$bin/$out" ] && return 0
  echo "build.sh: building $out (a cold build takes several minutes)..." >&2
  (cd "$here/$dir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$bin/$out.tmp" "$pkg") ||
    die "building $out failed (see the Go output above). It needs the Go module proxy (GOPROXY=$(go env GOPROXY)) and Go >= 1.24."
  mv "$bin/$out.tmp" "$bin/$out"
}

minor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)
k8s_ldflags="-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
build etcd etcd .
# kubelet and kube-proxy run the real node (testenv's node.rs); the rest the control plane.
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do
  build kubernetes "$c" "k8s.io/kubernetes/cmd/$c" "$k8s_ldflags"
done
build kwok kwok sigs.k8s.io/kwok/cmd/kwok "-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"

echo "$bin"
