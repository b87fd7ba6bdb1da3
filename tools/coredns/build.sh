#!/usr/bin/env bash
# Builds CoreDNS (the version go.mod pins, with the plugins main.go imports) from the Go
# module proxy into the cache, once. Prints the folder holding `coredns` on its last line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v go >/dev/null 2>&1 || { echo "coredns/build.sh: Go is needed to build CoreDNS (it comes with these machines; elsewhere https://go.dev/dl)" >&2; exit 1; }
cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
version=$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" { print $3 }' "$here/go.mod")
sum=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" "$here/build.sh" | sha256sum | cut -c1-12)
out="$cache/coredns/$version-$sum"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
if [ ! -x "$out/coredns" ]; then
  echo "coredns/build.sh: building CoreDNS $version from the Go module proxy (a few minutes cold)..." >&2
  (cd "$here" && GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0 \
    go build -trimpath -ldflags "-s -w" -o "$out/coredns.tmp" .) ||
    { echo "coredns/build.sh: building CoreDNS failed (it needs the Go module proxy and the Go version go.mod names)" >&2; exit 1; }
  mv "$out/coredns.tmp" "$out/coredns"
fi
echo "$out"
