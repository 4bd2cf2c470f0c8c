//go:build tools

// Package tools pins the linters `make lint` builds (see go.mod).
package tools

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
