//go:build tools

// Package k8sbuild is a wrapper module that only builds Kubernetes'
// binaries for the test cluster (scripts/k8s-setup.sh): `go install
// pkg@version` refuses k8s.io/kubernetes, whose go.mod replaces every
// k8s.io staging module, so this module requires it and replaces each
// staging module with its published v0.37.2.
package k8sbuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
