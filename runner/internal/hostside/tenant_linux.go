package hostside

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/runner"
)

// SetTenantCPU makes the tenant's parent cgroup dir (under a cgroup v1
// cpu hierarchy, or the v2 unified one) and sets its CPU weight:
// cpu.shares on v1, cpu.weight on v2 (runner.CPUWeight), so the sandboxes
// under it share that weight against other tenants'. On v2 the cpu,
// memory and pids controllers are enabled down to it, from root (a
// mount point) to dir.
func SetTenantCPU(root, dir string, v2 bool, weight int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tenant cgroup: %w", err)
	}
	w, shares := runner.CPUWeight(weight)
	if !v2 {
		return writeCgroup(filepath.Join(dir, "cpu.shares"), strconv.FormatUint(shares, 10))
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("tenant cgroup %s is not under %s", dir, root)
	}
	// Every ancestor of the tenant's group (root included) delegates the
	// controllers its children use; the tenant's group too, for its
	// sandboxes.
	p := root
	for _, part := range append(strings.Split(rel, "/"), "") {
		if err := writeCgroup(filepath.Join(p, "cgroup.subtree_control"), "+cpu +memory +pids"); err != nil {
			return err
		}
		p = filepath.Join(p, part)
	}
	return writeCgroup(filepath.Join(dir, "cpu.weight"), strconv.FormatUint(w, 10))
}

func writeCgroup(path, v string) error {
	if err := os.WriteFile(path, []byte(v), 0); err != nil {
		return fmt.Errorf("tenant cgroup: write %s: %w", path, err)
	}
	return nil
}
