//go:build tools

// Package tools pins the commands this module builds.
package tools

import _ "github.com/derailed/k9s"
