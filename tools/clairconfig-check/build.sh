#!/usr/bin/env bash
# Builds tools/clairconfig-check (Clair v4.9.0's own config loading and validation) from the
# Go module proxy into the cache, once. Prints the binary's path on its last line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v go >/dev/null 2>&1 || { echo "build.sh: Go 1.24 or newer is needed to build Clair's config checker" >&2; exit 1; }
cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
sum=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-12)
bin="$cache/tools/clairconfig-check-$sum"
if [ ! -x "$bin" ]; then
  mkdir -p "$(dirname "$bin")"
  echo "build.sh: building clairconfig-check (Clair v4.9.0's config package)..." >&2
  (cd "$here" && GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0 \
    go build -trimpath -o "$bin.tmp" .) || { echo "build.sh: building clairconfig-check failed" >&2; exit 1; }
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
