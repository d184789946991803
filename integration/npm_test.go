//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// npmInstall is the one npm setup of the tests: it installs the package in
// dir (relative to the repository) into dir/node_modules when its
// package.json is newer than the last install, compiles it with its own
// tsc (tsconfig.json) and returns dir's absolute path. node_modules and
// dist are kept between runs and never in git. Without node or npm the
// test is skipped (SANDBOXD_REQUIRE_NODE, or SANDBOXD_REQUIRE_TOOLS=1 as in
// scripts/test.sh, makes it fail: CI must not pass a client test it skipped).
func npmInstall(t *testing.T, dir string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("SANDBOXD_REQUIRE_NODE") != "" || os.Getenv("SANDBOXD_REQUIRE_TOOLS") == "1" {
				t.Fatalf("%s not found", tool)
			}
			t.Skipf("%s not found (SANDBOXD_REQUIRE_NODE or SANDBOXD_REQUIRE_TOOLS=1 makes this fail)", tool)
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = abs
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v in %s: %v\n%s", name, args, dir, err, out)
		}
	}
	stamp := filepath.Join(abs, "node_modules", ".sandboxd-installed")
	pkg, err := os.Stat(filepath.Join(abs, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(stamp); err != nil || st.ModTime().Before(pkg.ModTime()) {
		start := time.Now()
		run("npm", "install", "--no-audit", "--no-fund")
		os.WriteFile(stamp, nil, 0o644)
		t.Logf("npm install in %s took %s", dir, time.Since(start).Round(time.Millisecond))
	}
	run(filepath.Join(abs, "node_modules", ".bin", "tsc"), "-p", ".")
	return abs
}
