#!/usr/bin/env bash
# Builds KEDA's operator, metrics apiserver (adapter) and admission webhooks at the version
# pinned in go.mod from the Go module proxy into the cache, once, and copies KEDA's CRDs from
# the same module beside them. Prints the folder on its last line (about 7 minutes cold).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v go >/dev/null 2>&1 || { echo "keda/build.sh: Go 1.26 or newer is needed to build KEDA (https://go.dev/dl)" >&2; exit 1; }
cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
version=$(awk '$1 == "require" && $2 == "github.com/kedacore/keda/v2" { print $3 }' "$here/go.mod")
sum=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)
out="$cache/keda/$version-$sum"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
export GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0
for cmd in operator adapter webhooks; do
  [ -x "$out/keda-$cmd" ] && continue
  echo "keda/build.sh: building KEDA $version $cmd from the Go module proxy (minutes cold)..." >&2
  (cd "$here" && go build -trimpath -ldflags "-s -w -X github.com/kedacore/keda/v2/version.Version=$version" \
    -o "$out/keda-$cmd.tmp" "github.com/kedacore/keda/v2/cmd/$cmd") ||
    { echo "keda/build.sh: building $cmd failed (it needs the Go module proxy and Go 1.26)" >&2; exit 1; }
  mv "$out/keda-$cmd.tmp" "$out/keda-$cmd"
done
if [ ! -d "$out/crds" ]; then
  src=$(cd "$here" && go list -m -f '{{.Dir}}' github.com/kedacore/keda/v2)
  mkdir -p "$out/crds.tmp"
  cp "$src"/config/crd/bases/*.yaml "$out/crds.tmp/"
  mv "$out/crds.tmp" "$out/crds"
fi
echo "$out"
