// Command k8s-seccomp writes every Localhost seccomp profile the
// Kubernetes runner names (kubernetes.SeccompProfiles with the default
// SeccompDir) under DIR, the kubelet's seccomp root
// (<kubelet root-dir>/seccomp). Files already equal are left alone. The
// project's test cluster (scripts/k8s-setup.sh) runs it on its node.
//
//	k8s-seccomp DIR
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/sandboxd/sandboxd/runner/kubernetes"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: k8s-seccomp DIR")
		os.Exit(2)
	}
	total, written, err := writeProfiles(os.Args[1], kubernetes.DefaultSeccompDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8s-seccomp:", err)
		os.Exit(1)
	}
	fmt.Printf("k8s-seccomp: %d profiles under %s (%d written)\n", total, filepath.Join(os.Args[1], kubernetes.DefaultSeccompDir), written)
}

// writeProfiles writes the profiles under root (each atomically, 0644)
// and says how many there are and how many it had to write.
func writeProfiles(root, dir string) (total, written int, err error) {
	profiles, err := kubernetes.SeccompProfiles(dir)
	if err != nil {
		return 0, 0, err
	}
	names := make([]string, 0, len(profiles))
	for name := range profiles {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b := profiles[name]
		path := filepath.Join(root, name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return len(names), written, err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return len(names), written, err
		}
		if err := os.Rename(tmp, path); err != nil {
			return len(names), written, err
		}
		written++
	}
	return len(names), written, nil
}
