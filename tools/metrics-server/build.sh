#!/usr/bin/env bash
# Builds metrics-server at the version go.mod pins from the Go module proxy into the cache,
# once. Prints the binary's path on its last line (about 2 minutes cold).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/../build-go-main.sh" "$here" metrics-server "metrics-server (~2 minutes cold)" \
  sigs.k8s.io/metrics-server/cmd/metrics-server
