#!/usr/bin/env bash
# Builds tools/clairconfig-check (Clair v4.9.0's own config loading and validation) into the
# cache, once. Prints the binary's path on its last line.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/../build-go-main.sh" "$here" clairconfig-check "Clair v4.9.0's config package"
