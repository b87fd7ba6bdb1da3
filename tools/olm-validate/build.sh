#!/usr/bin/env bash
# Builds tools/olm-validate (operator-framework/api's bundle validators, the library behind
# `operator-sdk bundle validate`) from the Go module proxy into the cache, once. Prints the
# binary's path on its last line. tests/integration/olm.rs runs it on deploy/olm.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v go >/dev/null 2>&1 || { echo "olm-validate/build.sh: Go is needed (it comes with these machines; elsewhere https://go.dev/dl)" >&2; exit 1; }
cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
sum=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-12)
bin="$cache/tools/olm-validate-$sum"
if [ ! -x "$bin" ]; then
  mkdir -p "$(dirname "$bin")"
  echo "olm-validate/build.sh: building olm-validate (operator-framework/api v0.9.1, ~2 minutes cold)..." >&2
  (cd "$here" && GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0 \
    go build -trimpath -ldflags "-s -w" -o "$bin.tmp" .) || { echo "olm-validate/build.sh: building failed (it needs the Go module proxy)" >&2; exit 1; }
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
