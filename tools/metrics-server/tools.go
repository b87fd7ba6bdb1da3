//go:build tools

// Package tools pins metrics-server's command so `go mod tidy` keeps its dependencies.
package tools

import _ "sigs.k8s.io/metrics-server/cmd/metrics-server"
