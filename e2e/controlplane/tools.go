//go:build tools

// Package tools records the main packages this module builds, so that
// `go mod tidy` keeps their dependencies in go.mod/go.sum. It is never
// compiled (the `tools` build tag is never set); build.sh builds each
// command by its import path.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
