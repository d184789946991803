// Package wsvol is the one home of the workspace CSI volume's
// attributes: what the Kubernetes runner writes into a pod's inline
// volume (Attributes) and what the driver (wscsi) reads from it (Parse),
// apart from the driver so that sandboxd links neither the CSI nor the
// kubelet API for them.
package wsvol

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/workspace"
)

// The volume attributes a pod's volume may carry.
const (
	// AttrBytes is the filesystem's size in bytes (decimal).
	AttrBytes = "bytes"
	// AttrInodes is its number of inodes (decimal).
	AttrInodes = "inodes"
	// AttrEphemeral is what the kubelet adds to an inline volume's
	// attributes when the CSIDriver has podInfoOnMount (with the pod-info
	// keys, which share its prefix).
	AttrEphemeral = "csi.storage.k8s.io/ephemeral"
	kubeletPrefix = "csi.storage.k8s.io/"
)

// DefaultDriver is the driver's name (its CSIDriver object's).
const DefaultDriver = "workspace.sandboxd"

// Parse parses a volume's attributes: bytes and inodes (each optional:
// the workspace defaults), within workspace.Limits.Check and at most
// maxBytes (0: no cap). Any other key is refused (a typo must not give a
// default-sized workspace), except the kubelet's own.
func Parse(attrs map[string]string, maxBytes int64) (workspace.Limits, error) {
	var l workspace.Limits
	for k, v := range attrs {
		var dst *int64
		switch {
		case k == AttrBytes:
			dst = &l.Bytes
		case k == AttrInodes:
			dst = &l.Inodes
		case strings.HasPrefix(k, kubeletPrefix):
			continue
		default:
			return workspace.Limits{}, fmt.Errorf("unknown volume attribute %q (want %q, %q)", k, AttrBytes, AttrInodes)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return workspace.Limits{}, fmt.Errorf("volume attribute %s=%q: want a positive decimal integer", k, v)
		}
		*dst = n
	}
	if err := l.Check(); err != nil {
		return workspace.Limits{}, err
	}
	if e := l.Effective(); maxBytes > 0 && e.Bytes > maxBytes {
		return workspace.Limits{}, fmt.Errorf("volume attribute %s=%d is above this driver's maximum of %d", AttrBytes, e.Bytes, maxBytes)
	}
	return l, nil
}

// Attributes are the volume attributes of a workspace bounded by l (zero
// fields: the workspace defaults).
func Attributes(l workspace.Limits) map[string]string {
	l = l.Effective()
	return map[string]string{AttrBytes: strconv.FormatInt(l.Bytes, 10), AttrInodes: strconv.FormatInt(l.Inodes, 10)}
}
