#!/usr/bin/env bash
# Builds Jaeger's all-in-one (`cmd/jaeger`: OTLP receivers, in-memory storage, the query
# API) at the version go.mod pins from the Go module proxy into the cache, once. Prints the
# binary's path on its last line (about 3 minutes cold).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/../build-go-main.sh" "$here" jaeger "Jaeger all-in-one (~3 minutes cold)" \
  github.com/jaegertracing/jaeger/cmd/jaeger
