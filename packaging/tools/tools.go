//go:build tools

// Package tools pins the packager `make dist` builds into the cache.
package tools

import _ "github.com/goreleaser/nfpm/v2/cmd/nfpm"
