#!/usr/bin/env bash
# Builds CloudNativePG's manager (one binary: the operator, and the instance manager its
# operand pods run) at the version pinned in go.mod from the Go module proxy into the cache,
# once, and copies CloudNativePG's CRDs from the same module beside it. Prints the folder on
# its last line (about 4 minutes cold).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v go >/dev/null 2>&1 || { echo "cloudnative-pg/build.sh: Go 1.26 or newer is needed to build CloudNativePG (https://go.dev/dl)" >&2; exit 1; }
cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
module=github.com/cloudnative-pg/cloudnative-pg
version=$(awk -v m="$module" '$1 == "require" && $2 == m { print $3 }' "$here/go.mod")
sum=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)
out="$cache/cloudnative-pg/$version-$sum"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
export GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0
if [ ! -x "$out/manager" ]; then
  echo "cloudnative-pg/build.sh: building CloudNativePG $version from the Go module proxy (minutes cold)..." >&2
  (cd "$here" && go build -trimpath -ldflags "-s -w" -o "$out/manager.tmp" "$module/cmd/manager") ||
    { echo "cloudnative-pg/build.sh: building the manager failed (it needs the Go module proxy and Go 1.26)" >&2; exit 1; }
  mv "$out/manager.tmp" "$out/manager"
fi
if [ ! -d "$out/crds" ]; then
  src=$(cd "$here" && go list -m -f '{{.Dir}}' "$module")
  mkdir -p "$out/crds.tmp"
  cp "$src"/config/crd/bases/*.yaml "$out/crds.tmp/"
  chmod u+w "$out"/crds.tmp/*.yaml
  mv "$out/crds.tmp" "$out/crds"
fi
echo "$out"
