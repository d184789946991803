package config

import (
	"strings"
	"testing"
)

// Providers and tool files are checked at load, each problem naming its
// key; a good configuration decodes into typed sections.
func TestTurnsAndProviders(t *testing.T) {
	t.Parallel()
	c := Defaults()
	c.DataDir = "/var/lib/sandboxd"
	err := Decode([]byte(`
tools_dir: /etc/sandboxd/tools
tools: {replace_builtins: [bash], idempotent: [read_file]}
turns: {concurrency: 4, retries: 0, retry_backoff: 1s, keep: 10m}
providers:
  - name: notes
    command: [/workspace/server]
    effects: [exec, file_read]
    tools: {note: {effects: [file_read], parallel_safe: true}}
    start: boot
    restart_backoff: 2s
  - name: web
    url: https://mcp.example.com/mcp
    effects: [http]
`), &c)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Turns.Retries != 0 || c.Turns.Concurrency != 4 || c.Providers[0].Tools["note"].ParallelSafe == nil || c.Providers[1].URL == "" {
		t.Errorf("decoded %+v", c)
	}

	bad := Defaults()
	bad.DataDir = "/var/lib/sandboxd"
	err = Decode([]byte(`
tools_dir: relative/dir
turns: {concurrency: 0}
tenants:
  - name: "provider:x"
    api_keys: [k1]
providers:
  - name: a__b
    command: [/s]
    effects: [file_read]
  - name: both
    command: [/s]
    url: https://mcp.example.com/
    effects: [exec]
  - name: sub
    command: [/s]
    effects: [exec]
    tools: {t: {effects: [http]}}
    start: sometimes
    allow_private_cidrs: [not-a-cidr]
`), &bad)
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Validate()
	for _, want := range []string{
		`tools_dir "relative/dir": must be an absolute path`,
		`turns.concurrency 0: must be positive`,
		`tenants[0].name "provider:x"`,
		`providers[0] ("a__b"): name`,
		`providers[0] ("a__b"): command: a stdio provider needs a program and the exec effect`,
		`providers[1] ("both"): set command`,
		`providers[2] ("sub"): tools.t.effects: "http" is not among the provider's effects`,
		`providers[2] ("sub"): start "sometimes"`,
		`providers[2] ("sub"): allow_private_cidrs: "not-a-cidr"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in\n%v", want, err)
		}
	}
	if err := Decode([]byte("providers:\n  - name: x\n    comand: [/s]\n"), &bad); err == nil || !strings.Contains(err.Error(), "command") {
		t.Errorf("a misspelt provider key: %v", err)
	}
}
