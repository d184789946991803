//go:build tools

// Package etcdbuild is a wrapper module that only builds etcd's server
// for the test cluster (scripts/k8s-setup.sh).
package etcdbuild

import _ "go.etcd.io/etcd/server/v3"
