// Command k8s-seccomp writes every Localhost seccomp profile the
// Kubernetes runner names (kubernetes.SeccompProfiles with the default
// SeccompDir) under DIR, the kubelet's seccomp root
// (<kubelet root-dir>/seccomp). Files already equal are left alone. The
// project's test cluster (scripts/k8s-setup.sh) runs it on its node.
// With PATHS, it also writes there the policy's masked and read-only
// paths as JSON ({"masked": [...], "readonly": [...]}): the node's runc
// wrapper (scripts/k8s/runc-masked.sh) adds them to every container
// (Kubernetes itself masks only its own default list).
//
//	k8s-seccomp DIR [PATHS]
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner/kubernetes"
	"github.com/sandboxd/sandboxd/tools"
)

func main() {
	if len(os.Args) != 2 && len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: k8s-seccomp DIR [PATHS]")
		os.Exit(2)
	}
	if len(os.Args) == 3 {
		iso := policy.Compile([]tools.Effect{tools.EffectExec}).Spec
		b, err := json.Marshal(map[string][]string{"masked": iso.MaskedPaths, "readonly": iso.ReadonlyPaths})
		if err == nil {
			err = os.WriteFile(os.Args[2], b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "k8s-seccomp:", err)
			os.Exit(1)
		}
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
