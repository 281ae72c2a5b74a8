//go:build tools

// Package tools records the main package this module builds, so that
// `go mod tidy` keeps its dependencies in go.mod/go.sum. It is never
// compiled (the `tools` build tag is never set); build.sh builds the
// command by its import path.
package tools

import (
	// The coredns command (coredns.go), with the default plugin set that
	// core/plugin/zplugin.go compiles in.
	_ "github.com/coredns/coredns"
)
