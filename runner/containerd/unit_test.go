package containerd

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/internal/hostside"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

func TestBuildSpec(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode   runner.WorkspaceMode
		net    runner.NetworkMode
		wsOpt  string // "" = no workspace mount
		egress bool
	}{
		{runner.WorkspaceNone, runner.NetworkNone, "", false},
		{runner.WorkspaceReadOnly, runner.NetworkNone, "ro", false},
		{runner.WorkspaceReadWrite, runner.NetworkEgress, "rw", true},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			l := hostside.DefaultLimits
			s := buildSpec(specInput{
				ID: "sb1", Namespace: "ns", Spec: runner.SandboxSpec{Workspace: "/w", Isolation: runnertest.Isolation(tc.mode, tc.net)},
				Limits: l, AgentPath: "/opt/agent", RunDir: "/state/sb1/run", NetnsPath: "/state/sb1/netns", TmpBytes: 1 << 20,
			})
			p := s.Process
			// The agent: uid 0 with its capabilities only; the code's
			// uid is on its command line.
			if p.User.UID != 0 || p.User.GID != 0 || !p.NoNewPrivileges {
				t.Errorf("user %+v nnp %v", p.User, p.NoNewPrivileges)
			}
			c, agentCaps := p.Capabilities, []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"}
			if !slices.Equal(c.Bounding, agentCaps) || !slices.Equal(c.Effective, agentCaps) || !slices.Equal(c.Permitted, agentCaps) || len(c.Inheritable)+len(c.Ambient) != 0 {
				t.Errorf("capabilities %+v", c)
			}
			if !strings.Contains(strings.Join(p.Args, " "), "--uid 65534 --gid 65534") {
				t.Errorf("args %v: the code's uid and gid missing", p.Args)
			}
			if len(p.Env) != 0 || p.Args[0] != "/usr/bin/env" || p.Args[1] != "-i" || p.Args[2] != hostside.AgentBinary {
				t.Errorf("env %v args %v", p.Env, p.Args)
			}
			if got := slices.Contains(p.Args, "--egress-listen"); got != tc.egress {
				t.Errorf("egress flags %v in %v", got, p.Args)
			}
			if !s.Root.Readonly {
				t.Error("root is writable")
			}
			mounts := map[string][]string{}
			for _, m := range s.Mounts {
				mounts[m.Destination] = m.Options
			}
			for dst, opt := range map[string]string{hostside.AgentBinary: "ro", hostside.AgentDir: "rw", "/tmp": "size=1048576", "/dev/shm": "size=1048576", "/sys": "ro"} {
				if !slices.Contains(mounts[dst], opt) {
					t.Errorf("mount %s options %v, want %s", dst, mounts[dst], opt)
				}
			}
			if ws, ok := mounts[runner.WorkspaceDir]; (tc.wsOpt == "") == ok || ok && !slices.Contains(ws, tc.wsOpt) {
				t.Errorf("workspace mount %v present %v, want %q", ws, ok, tc.wsOpt)
			}
			lin := s.Linux
			var netns string
			types := map[specs.LinuxNamespaceType]bool{}
			for _, ns := range lin.Namespaces {
				types[ns.Type] = true
				if ns.Type == specs.NetworkNamespace {
					netns = ns.Path
				}
			}
			for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace, specs.NetworkNamespace} {
				if !types[want] {
					t.Errorf("no %s namespace", want)
				}
			}
			if netns != "/state/sb1/netns" {
				t.Errorf("netns path %q", netns)
			}
			r := lin.Resources
			if *r.Memory.Limit != l.MemoryBytes || *r.Memory.Swap != l.MemoryBytes || *r.Pids.Limit != l.PIDs || *r.CPU.Quota != 100_000 || *r.CPU.Period != 100_000 {
				t.Errorf("resources memory %d swap %d pids %d cpu %d/%d", *r.Memory.Limit, *r.Memory.Swap, *r.Pids.Limit, *r.CPU.Quota, *r.CPU.Period)
			}
			if lin.CgroupsPath != "/ns/sb1" {
				t.Errorf("cgroups path %q", lin.CgroupsPath)
			}
			if !slices.Contains(lin.MaskedPaths, "/proc/kcore") || !slices.Contains(lin.ReadonlyPaths, "/proc/sys") {
				t.Errorf("masked %v readonly %v", lin.MaskedPaths, lin.ReadonlyPaths)
			}
			iso := runnertest.Isolation(tc.mode, tc.net)
			if lin.Seccomp != iso.Seccomp || !slices.Equal(lin.MaskedPaths, iso.MaskedPaths) || !slices.Equal(lin.ReadonlyPaths, iso.ReadonlyPaths) {
				t.Error("seccomp profile or masked paths not the isolation's")
			}
			gv := buildSpec(specInput{ID: "sb1", Namespace: "ns", Spec: runner.SandboxSpec{Workspace: "/w", Isolation: iso}, Limits: l, GVisor: true})
			if gv.Linux.Seccomp != iso.SeccompGVisor {
				t.Error("gVisor sandbox without the isolation's gVisor profile")
			}
			rl := map[string]uint64{}
			for _, r := range p.Rlimits {
				rl[r.Type] = r.Hard
			}
			if rl["RLIMIT_NOFILE"] != uint64(l.NoFile) || rl["RLIMIT_FSIZE"] != uint64(l.FileSize) || rl["RLIMIT_CORE"] != 0 {
				t.Errorf("rlimits %v", rl)
			}
		})
	}
}

func TestMergeLimits(t *testing.T) {
	t.Parallel()
	got := hostside.MergeLimits(runner.Limits{MemoryBytes: 1 << 40, PIDs: 10}, hostside.DefaultLimits)
	if got.MemoryBytes != hostside.DefaultLimits.MemoryBytes || got.PIDs != 10 || got.Timeout != time.Minute {
		t.Errorf("mergeLimits = %+v", got)
	}
}

func TestOwnerAlive(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		label        string
		alive, known bool
	}{
		{hostside.SelfProc(), true, true},
		{fmt.Sprintf("%d:1", os.Getpid()), false, true},
		{"999999999:5", false, true},
		{"", false, false},
		{"abc:def", false, false},
	} {
		alive, known := hostside.OwnerAlive(tc.label)
		if alive != tc.alive || known != tc.known {
			t.Errorf("hostside.OwnerAlive(%q) = %v, %v; want %v, %v", tc.label, alive, known, tc.alive, tc.known)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/bad\09`: `/bad\09`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNormalizeRef(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"sandboxd/python:latest":           "docker.io/sandboxd/python:latest",
		"sandboxd/python":                  "docker.io/sandboxd/python:latest",
		"registry.local/x/y:1":             "registry.local/x/y:1",
		"docker.io/sandboxd/python:latest": "docker.io/sandboxd/python:latest",
	} {
		if got := normalizeRef(in); got != want {
			t.Errorf("normalizeRef(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNetns: the namespace has loopback up and nothing else, and goes
// away on removal. Needs root (CAP_SYS_ADMIN).
func TestNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	path := t.TempDir() + "/netns"
	if err := newNetns(path); err != nil {
		t.Fatal(err)
	}
	defer removeNetns(path)
	ifaces, up, err := netnsLinks(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ifaces, []string{"lo"}) || !up {
		t.Fatalf("links %v, lo up %v; want only lo, up", ifaces, up)
	}
	if err := removeNetns(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("netns pin still there: %v", err)
	}
}

// TestOwnerZombie: a killed owner that nobody waited for is dead.
func TestOwnerZombie(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	label := hostside.ProcIdentity(cmd.Process.Pid)
	if alive, _ := hostside.OwnerAlive(label); !alive {
		t.Fatal("running owner reported dead")
	}
	cmd.Process.Kill()
	deadline := time.Now().Add(5 * time.Second)
	for !hostside.ProcZombie(cmd.Process.Pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive, known := hostside.OwnerAlive(label); alive || !known {
		t.Fatalf("zombie owner: alive %v known %v", alive, known)
	}
}
