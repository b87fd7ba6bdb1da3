//go:build tools

// Package tools pins Clair's two commands so `go mod tidy` keeps their dependencies.
package tools

import (
	_ "github.com/quay/clair/v4/cmd/clair"
	_ "github.com/quay/clair/v4/cmd/clairctl"
)
