//go:build tools

// Package tools pins KEDA's three commands (operator, metrics apiserver, admission webhooks)
// so `go mod tidy` keeps their dependencies.
package tools

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
	_ "github.com/kedacore/keda/v2/cmd/webhooks"
)
