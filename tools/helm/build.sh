#!/usr/bin/env bash
# Builds Helm (the version below) from the Go module proxy into the cache, once. Prints the
# folder holding `helm` on its last line. The chart's checks (tests/integration/helm.rs) run it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=v3.22.0
command -v go >/dev/null 2>&1 || { echo "helm/build.sh: Go is needed to build Helm (it comes with these machines; elsewhere https://go.dev/dl)" >&2; exit 1; }
cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
sum=$(sha256sum "$here/build.sh" | cut -c1-12)
out="$cache/helm/$version-$sum"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
if [ ! -x "$out/helm" ]; then
  echo "helm/build.sh: building Helm $version from the Go module proxy (a few minutes cold)..." >&2
  GOBIN="$out/bin.tmp" GOSUMDB=off GOTOOLCHAIN=local CGO_ENABLED=0 \
    go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$version" ||
    { echo "helm/build.sh: building Helm failed (it needs the Go module proxy and Go 1.26)" >&2; exit 1; }
  mv "$out/bin.tmp/helm" "$out/helm"
  rmdir "$out/bin.tmp"
fi
echo "$out"
