//go:build tools

// Package tools pins CloudNativePG's one command (the operator, which is also the instance
// manager its operand pods run) so `go mod tidy` keeps its dependencies.
package tools

import (
	_ "github.com/cloudnative-pg/cloudnative-pg/cmd/manager"
)
