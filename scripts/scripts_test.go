// Package scripts holds the shell scripts that set up, build and test
// sandboxd; its tests check the parts of them that read this machine's
// state.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// build-images.sh takes the Debian mirror (and the security mirror) from
// the host's apt sources, one-line and deb822 alike, as apt reads them:
// disabled stanzas and files are skipped, options in brackets are not the
// URI, a suite matches as a whole word. No host is written into the
// script.
func TestBuildImagesMirrorFromAptSources(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		files       map[string]string
		env         []string
		main, secur string
	}{
		{
			name: "deb822",
			files: map[string]string{"sources.list.d/debian.sources": `# a comment
Types: deb deb-src
URIs: http://mirror.example.com/debian http://second.example.com/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://security.example.com/debian-security
Suites: bookworm-security
Components: main
`},
			main: "http://mirror.example.com/debian", secur: "http://security.example.com/debian-security",
		},
		{
			name: "deb822 disabled stanza, deb-src only, other suite",
			files: map[string]string{"sources.list.d/a.sources": `Types: deb
URIs: http://off.example.com/debian
Suites: bookworm
Enabled: no

Types: deb-src
URIs: http://src.example.com/debian
Suites: bookworm

Types: deb
URIs: http://trixie.example.com/debian
Suites: trixie bookworm-backports

types: deb
uris: http://on.example.org/debian
suites: bookworm
`},
			main: "http://on.example.org/debian",
		},
		{
			name: "one-line with options, behind a corporate mirror",
			files: map[string]string{
				"sources.list": `# deb http://commented.example.com/debian bookworm main
deb-src http://src.example.com/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian.gpg] https://apt.corp.example.com/debian bookworm main
deb https://apt.corp.example.com/security bookworm-security main
`,
				"sources.list.d/other.list.disabled": "deb http://disabled.example.com/debian bookworm main\n",
			},
			main: "https://apt.corp.example.com/debian", secur: "https://apt.corp.example.com/security",
		},
		{
			name:  "DEBIAN_MIRROR wins",
			files: map[string]string{"sources.list": "deb http://mirror.example.com/debian bookworm main\n"},
			env:   []string{"DEBIAN_MIRROR=http://override.example.net/debian"},
			main:  "http://override.example.net/debian",
		},
		{
			name:  "nothing for the suite",
			files: map[string]string{"sources.list": "deb http://mirror.example.com/debian trixie main\n"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755); err != nil {
				t.Fatal(err)
			}
			for name, content := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("bash", "build-images.sh", "--print-mirror")
			cmd.Env = append(os.Environ(), "APT_DIR="+dir, "DEBIAN_SUITE=bookworm", "DEBIAN_MIRROR=")
			cmd.Env = append(cmd.Env, tc.env...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("build-images.sh --print-mirror: %v", err)
			}
			lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			for len(lines) < 2 {
				lines = append(lines, "")
			}
			if lines[0] != tc.main || lines[1] != tc.secur || len(lines) != 2 {
				t.Errorf("mirrors %q, want %q and %q", lines, tc.main, tc.secur)
			}
		})
	}
}
