#!/usr/bin/env bash
# Builds Clair's `clair` and `clairctl` at the version pinned in go.mod from the Go module
# proxy into the cache, once. Prints the directory holding both binaries on its last line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v go >/dev/null 2>&1 || { echo "build.sh: Go 1.24 or newer is needed to build Clair (apt-get install golang-go, or https://go.dev/dl)" >&2; exit 1; }
cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
version=$(awk '$1 == "require" && $2 == "github.com/quay/clair/v4" { print $3 }' "$here/go.mod")
sum=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)
out="$cache/clair/$version-$sum"
if [ ! -x "$out/clair" ] || [ ! -x "$out/clairctl" ]; then
  mkdir -p "$out"
  echo "build.sh: building clair and clairctl $version from the Go module proxy (several minutes cold)..." >&2
  for cmd in clair clairctl; do
    (cd "$here" && GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0 \
      go build -trimpath -ldflags "-X github.com/quay/clair/v4/cmd.Version=$version" \
        -o "$out/$cmd.tmp" "github.com/quay/clair/v4/cmd/$cmd") \
      || { echo "build.sh: building $cmd failed" >&2; exit 1; }
    mv "$out/$cmd.tmp" "$out/$cmd"
  done
fi
echo "$out"
