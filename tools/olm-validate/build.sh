#!/usr/bin/env bash
# Builds tools/olm-validate (operator-framework/api's bundle validators, the library behind
# `operator-sdk bundle validate`) into the cache, once. Prints the binary's path on its last
# line. tests/integration/olm.rs runs it on deploy/olm.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/../build-go-main.sh" "$here" olm-validate "operator-framework/api v0.9.1's validators (~2 minutes cold)"
