#!/usr/bin/env bash
# Builds a Go main package for a tools/ folder (its go.mod, go.sum and .go files) from the Go
# module proxy into the cache, once per content. Prints the binary's path on its last line.
# Usage: tools/build-go-main.sh FOLDER NAME WHAT [PACKAGE]
#   WHAT: a few words for the progress line; PACKAGE: the main package, by default the
#   folder's own (`.`), else one of a module the folder's go.mod requires.
set -euo pipefail
here=$1 name=$2 what=$3 package=${4:-.}
command -v go >/dev/null 2>&1 || { echo "$name: Go is needed to build it (it comes with these machines; elsewhere https://go.dev/dl)" >&2; exit 1; }
cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
sum=$(cat "$here/go.mod" "$here/go.sum" "$here"/*.go | sha256sum | cut -c1-12)
bin="$cache/tools/$name-$sum"
mkdir -p "$(dirname "$bin")"
# One build at a time (CI and a test run by hand may ask together).
exec 9>"$bin.lock"
flock 9
if [ ! -x "$bin" ]; then
  echo "$name: building $what from the Go module proxy..." >&2
  (cd "$here" && GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0 \
    go build -trimpath -ldflags "-s -w" -o "$bin.tmp" "$package") ||
    { echo "$name: building failed (it needs the Go module proxy and the Go version go.mod names)" >&2; exit 1; }
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
