#!/usr/bin/env bash
# Builds the Go main package in a tools/ folder (its go.mod, go.sum and main.go) from the Go
# module proxy into the cache, once per content. Prints the binary's path on its last line.
# Usage: tools/build-go-main.sh FOLDER NAME WHAT   (WHAT: a few words for the progress line)
set -euo pipefail
here=$1 name=$2 what=$3
command -v go >/dev/null 2>&1 || { echo "$name: Go is needed to build it (it comes with these machines; elsewhere https://go.dev/dl)" >&2; exit 1; }
cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
sum=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-12)
bin="$cache/tools/$name-$sum"
mkdir -p "$(dirname "$bin")"
# One build at a time (CI and a test run by hand may ask together).
exec 9>"$bin.lock"
flock 9
if [ ! -x "$bin" ]; then
  echo "$name: building $what from the Go module proxy..." >&2
  (cd "$here" && GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0 \
    go build -trimpath -ldflags "-s -w" -o "$bin.tmp" .) ||
    { echo "$name: building failed (it needs the Go module proxy and the Go version go.mod names)" >&2; exit 1; }
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
