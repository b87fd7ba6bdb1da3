//go:build tools

// Package tools pins Jaeger's all-in-one command (OTLP receivers, in-memory storage and the
// query API) so `go mod tidy` keeps its dependencies.
package tools

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
