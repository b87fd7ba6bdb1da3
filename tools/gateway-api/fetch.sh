#!/usr/bin/env bash
# Fetches Gateway API's released CRDs (the standard channel's HTTPRoute, Gateway and
# GatewayClass) at VERSION from the Go module proxy into the cache, once, checking the
# module's hash against the one pinned here. Prints the folder on its last line.
# Usage: tools/gateway-api/fetch.sh VERSION
#   v1.6.3: current; an HTTPRoute rule has `timeouts`.
#   v1.1.0: the last release whose standard HTTPRoute has no `timeouts` (the apiserver
#           prunes it): how the operator behaves on older clusters.
set -euo pipefail
version=${1:?usage: tools/gateway-api/fetch.sh VERSION}
case $version in
  v1.6.3) pinned='h1:lKpJa5bGlraC/QeACvCpsHLdmO6y0iKfzVl6gzaFEYc=' ;;
  v1.1.0) pinned='h1:DsLDXCi6jR+Xz8/xd0Z1PYl2Pn0TyaFMOPPZIj4inDM=' ;;
  *) echo "gateway-api/fetch.sh: no hash pinned for $version (add it to this script)" >&2; exit 1 ;;
esac
command -v go >/dev/null 2>&1 || { echo "gateway-api/fetch.sh: Go is needed to fetch the module (https://go.dev/dl)" >&2; exit 1; }
cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
out="$cache/gateway-api/$version"
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
if [ ! -d "$out" ]; then
  echo "gateway-api/fetch.sh: fetching sigs.k8s.io/gateway-api@$version from the Go module proxy..." >&2
  json=$(cd / && GOSUMDB=off GOTOOLCHAIN=local GOFLAGS= go mod download -json "sigs.k8s.io/gateway-api@$version") ||
    { echo "gateway-api/fetch.sh: the Go module proxy did not serve sigs.k8s.io/gateway-api@$version" >&2; exit 1; }
  sum=$(sed -n 's/^\t"Sum": "\(.*\)",$/\1/p' <<<"$json")
  [ "$sum" = "$pinned" ] ||
    { echo "gateway-api/fetch.sh: sigs.k8s.io/gateway-api@$version has hash $sum, pinned $pinned" >&2; exit 1; }
  dir=$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$json")
  mkdir -p "$out.tmp"
  for kind in httproutes gateways gatewayclasses; do
    cp "$dir/config/crd/standard/gateway.networking.k8s.io_$kind.yaml" "$out.tmp/"
  done
  chmod u+w "$out.tmp"/*
  mv "$out.tmp" "$out"
fi
echo "$out"
