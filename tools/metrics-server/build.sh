#!/usr/bin/env bash
# Builds metrics-server at the version pinned in go.mod from the Go module proxy into the
# cache, once. Prints the binary's path on its last line (about 2 minutes cold).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v go >/dev/null 2>&1 || { echo "metrics-server/build.sh: Go 1.26 or newer is needed (https://go.dev/dl)" >&2; exit 1; }
cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
version=$(awk '$1 == "require" && $2 == "sigs.k8s.io/metrics-server" { print $3 }' "$here/go.mod")
sum=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)
bin="$cache/tools/metrics-server-$version-$sum"
mkdir -p "$(dirname "$bin")"
exec 9>"$bin.lock"
flock 9
if [ ! -x "$bin" ]; then
  echo "metrics-server/build.sh: building metrics-server $version from the Go module proxy..." >&2
  (cd "$here" && GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0 \
    go build -trimpath -ldflags "-s -w" -o "$bin.tmp" sigs.k8s.io/metrics-server/cmd/metrics-server) ||
    { echo "metrics-server/build.sh: building failed (it needs the Go module proxy and Go 1.26)" >&2; exit 1; }
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
